/* gpucheck cites sources a user can open, never Ember's research notes.
 *
 * Issue 9 ("Also"): every "why" of gpucheck, and all other text it prints
 * (explain, whatif, host checks, image verdicts, JSON), cites public pages --
 * NVIDIA's documentation, PyTorch's files, libnvidia-container, issue threads
 * -- never the notes outside the project (shared/reference/cuda-compat.md,
 * gpucheck-anchors.md) that arch_table's rows were written from. Citations
 * go through one mechanism: a check names sources.tsv keys
 * (gc_check_source), the output names their URLs.
 *
 * The tests:
 * - sources.tsv: every key a data row names exists, every url is one https://
 *   address, and the keys gpucheck cites by name have one;
 * - the mechanism: keys without a url add nothing, a url is cited once, the
 *   text output ends the why line with "(source: URL)", the JSON lists them;
 * - the output: the main commands over the test fixtures and the fake fleet
 *   (explain of every code, whatif over the classic cases, inspect of the
 *   committed fixtures, fleet of tests/fixtures/fleet, host on an empty root
 *   and on the fake libcuda) in text and JSON, and the string literals of
 *   tools/gpucheck and runtime/ (messages of paths the runs do not reach),
 *   and the texts of cuda_errors.tsv: none may cite a note outside the
 *   project ("cuda-compat.md", "gpucheck-anchors", a ".md 2.2" section), and
 *   every "(source: " must be followed by an https:// address. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "arch_table.h"
#include "ember/runtime.h"
#include "gpucheck.h"

static const char *src_dir = ".";
static char tmp_dir[PATH_MAX];

/* ------------------------------------------------------------ the rule --- */

/* What a citation of a file outside the project looks like in output. */
static const char *const forbidden[] = {"cuda-compat.md", "gpucheck-anchors", "engine-anchors", "anchors.md",
                                        "anchors P",      "anchors 1",         "shared/reference", "reference/cuda",
                                        "\xc2\xa7" /* section sign */};

/* NULL when text is clean, else a static description of the first offence. */
static const char *offence(const char *text) {
  static char why[200];
  for (size_t i = 0; i < sizeof forbidden / sizeof *forbidden; i++) {
    const char *p = strstr(text, forbidden[i]);
    if (p) {
      snprintf(why, sizeof why, "cites '%s': ...%.60s...", forbidden[i], p > text + 20 ? p - 20 : text);
      return why;
    }
  }
  /* A section of a markdown file: "notes.md 2.2", "x.md 1 note 3". */
  for (const char *p = strstr(text, ".md "); p; p = strstr(p + 1, ".md ")) {
    if (isdigit((unsigned char)p[4])) {
      snprintf(why, sizeof why, "cites a section of a .md file: ...%.60s...", p > text + 30 ? p - 30 : text);
      return why;
    }
  }
  for (const char *p = strstr(text, "(source: "); p; p = strstr(p + 1, "(source: ")) {
    if (p[9] == '%') continue; /* the format string that prints one */
    if (strncmp(p + 9, "https://", 8)) {
      snprintf(why, sizeof why, "a source that is not an https:// address: %.60s", p);
      return why;
    }
  }
  /* The line the text output gives a check without a why. */
  for (const char *p = strstr(text, "         source: "); p; p = strstr(p + 1, "         source: ")) {
    if (p[17] != '%' && strncmp(p + 17, "https://", 8)) {
      snprintf(why, sizeof why, "a source line that is not an https:// address: %.60s", p + 9);
      return why;
    }
  }
  return NULL;
}

static void expect_clean(const char *what, const char *text) {
  const char *o = offence(text);
  if (o) fail_msg("%s: %s", what, o);
}

/* Renders a report as people and machines see it and checks both. */
static void expect_report_clean(const char *what, const gc_report *r) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  gc_report_print(r, f, 0);
  fclose(f);
  char label[300];
  snprintf(label, sizeof label, "%s (text)", what);
  expect_clean(label, buf);
  free(buf);
  json_t *j = gc_report_json(r);
  char *js = json_dumps(j, JSON_COMPACT);
  assert_non_null(js);
  snprintf(label, sizeof label, "%s (json)", what);
  expect_clean(label, js);
  /* Every check's "sources" holds https:// addresses only. */
  json_t *secs = json_object_get(j, "sections");
  for (size_t i = 0; i < json_array_size(secs); i++) {
    json_t *checks = json_object_get(json_array_get(secs, i), "checks");
    for (size_t k = 0; k < json_array_size(checks); k++) {
      json_t *src = json_object_get(json_array_get(checks, k), "sources");
      for (size_t u = 0; u < json_array_size(src); u++)
        if (strncmp(json_string_value(json_array_get(src, u)), "https://", 8))
          fail_msg("%s: a check's sources holds '%s'", what, json_string_value(json_array_get(src, u)));
    }
  }
  free(js);
  json_decref(j);
}

/* The rule itself, on the old texts and on the new ones. */
static void test_rule_catches_the_old_citations(void **state) {
  (void)state;
  assert_non_null(offence("the floor 525.60.13 (cuda-compat.md 2.2)."));
  assert_non_null(offence("needs CUDA >= 12.4 (cuda-compat.md 1 note 3)"));
  assert_non_null(offence("Usual causes (gpucheck-anchors P1,P2,P10)"));
  assert_non_null(offence("src/cli/dsl.c; gpucheck-anchors.md 1.4)"));
  assert_non_null(offence("what failed (notes.md 3.2)"));
  assert_non_null(offence("why: x (source: CUDA13-HDR)"));
  assert_null(offence("why: x (source: https://docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html)."));
  assert_null(offence("Forward compatibility (cuda-compat-12-0 package); a cuda-compat copy"));
  assert_null(offence("docs: docs/gpucheck.md\n"));
  assert_null(offence("Tesla P4, Tesla P40"));
  assert_null(offence("R470 is the last branch [secondary source: NVIDIA's driver roadmap]"));
  assert_non_null(offence("  [info] x\n         source: GC-ANCHORS\n"));
}

/* ----------------------------------------------------------- sources.tsv --- */

static void expect_keys_known(const char *what, const char *keys) {
  for (const char *p = keys; *p;) {
    char key[64];
    size_t len = strcspn(p, ",");
    assert_true(len > 0 && len < sizeof key);
    memcpy(key, p, len);
    key[len] = '\0';
    if (!em_source_lookup(key)) fail_msg("%s names source key '%s', which sources.tsv lacks", what, key);
    p += len + (p[len] == ',');
  }
}

static void test_sources_table(void **state) {
  (void)state;
  assert_true(em_source_count() > 50);
  for (size_t i = 0; i < em_source_count(); i++) {
    const em_source_row *s = em_source_at(i);
    assert_true(s->key[0] && s->where[0]);
    if (s->url[0] && (strncmp(s->url, "https://", 8) || strpbrk(s->url, " \t\"")))
      fail_msg("source %s: url '%s' is not one https:// address", s->key, s->url);
    expect_clean(s->key, s->url);
  }
  assert_null(em_source_at(em_source_count()));
  for (size_t i = 0; i < em_arch_count(); i++) expect_keys_known("cc.tsv", em_arch_at(i)->source);
  for (size_t i = 0; i < em_toolkit_count(); i++) expect_keys_known("toolkit.tsv", em_toolkit_at(i)->source);
  for (size_t i = 0; i < em_torch_count(); i++) expect_keys_known("torch.tsv", em_torch_at(i)->source);
  for (size_t i = 0; i < em_cuda_error_count(); i++) expect_keys_known("cuda_errors.tsv", em_cuda_error_at(i)->source);
  for (size_t i = 0; i < em_arch_support_count(); i++)
    expect_keys_known("arch_support.tsv", em_arch_support_at(i)->source);
  /* Every torch row and every last-branch row can be opened by a user. */
  for (size_t i = 0; i < em_torch_count(); i++)
    if (!em_source_url(em_torch_at(i)->source))
      fail_msg("torch %s %s: no source with a url", em_torch_at(i)->release, em_torch_at(i)->variant);
  for (size_t i = 0; i < em_arch_support_count(); i++) assert_non_null(em_source_url(em_arch_support_at(i)->source));
  /* The keys gpucheck names in its code. */
  static const char *const cited[] = {"MVC", "FWD", "PTXMAP", "RN13.1", "CLANG-CUDA", "BW-COMPAT", "LIBNVC-DSL",
                                      "CUDA-DRV-TYPES", "CUDART-TYPES", "NVML-RETURN", "SHINE-30", "NVCT-152"};
  for (size_t i = 0; i < sizeof cited / sizeof *cited; i++)
    if (!em_source_url(cited[i])) fail_msg("key %s, cited by gpucheck, has no url", cited[i]);
  /* The research notes have no url: they are never cited to users. */
  assert_null(em_source_url("GC-ANCHORS"));
  assert_null(em_source_url("LOCAL"));
  assert_string_equal(em_source_url("LOCAL,CUDA13-HDR,MVC,FWD"),
                      "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html");
  assert_null(em_source_url("NO-SUCH-KEY"));
  assert_null(em_source_url(""));
  assert_null(em_source_url(NULL));
  assert_null(em_source_lookup("MV")); /* exact keys only */
}

/* The texts of the error table reach `gpucheck explain` and Ember's own messages. */
static void test_error_table_texts(void **state) {
  (void)state;
  for (size_t i = 0; i < em_cuda_error_count(); i++) {
    const em_cuda_error_row *r = em_cuda_error_at(i);
    expect_clean(r->name, r->description);
    expect_clean(r->name, r->message);
    expect_clean(r->name, r->causes);
    expect_clean(r->name, r->check);
  }
}

/* --------------------------------------------------------- the mechanism --- */

static void test_check_source(void **state) {
  (void)state;
  gc_report *r = gc_report_new("test");
  gc_section *s = gc_section_add(r, "Section");
  gc_check *a = gc_check_add(s, GC_INFO, "a", "with detail");
  gc_check_detail(a, "The floor is 525.60.13.");
  gc_check_source(a, "LOCAL,MVC,GC-ANCHORS,NO-SUCH-KEY");
  gc_check_source(a, "MVC,FWD"); /* MVC once */
  gc_check *b = gc_check_add(s, GC_INFO, "b", "no detail");
  gc_check_source(b, "CUDA-DRV-TYPES");
  gc_check *c = gc_check_add(s, GC_INFO, "c", "only notes");
  gc_check_detail(c, "From local experiments");
  gc_check_source(c, "LOCAL,GC-ANCHORS");
  gc_check *d = gc_check_add(s, GC_INFO, "d", "a url from another report");
  gc_check_detail(d, "Detail without a stop");
  gc_check_source_url(d, "https://github.com/NVIDIA/warp/issues/219");
  gc_check_source_url(d, "not a url with spaces");
  gc_check_source_url(d, "");
  gc_check_source(d, NULL);

  assert_string_equal(a->sources, "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html "
                                  "https://docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html");
  assert_null(c->sources);
  assert_string_equal(d->sources, "https://github.com/NVIDIA/warp/issues/219");

  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  gc_report_print(r, f, 0);
  fclose(f);
  assert_non_null(strstr(buf, "why: The floor is 525.60.13 (source: "
                              "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html).\n"));
  assert_null(strstr(buf, "forward-compatibility.html")); /* one URL per check in text */
  assert_non_null(strstr(buf, "         source: https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TYPES.html\n"));
  assert_non_null(strstr(buf, "why: From local experiments\n"));
  assert_non_null(strstr(buf, "why: Detail without a stop (source: https://github.com/NVIDIA/warp/issues/219)\n"));
  free(buf);

  json_t *j = gc_report_json(r);
  json_t *checks = json_object_get(json_array_get(json_object_get(j, "sections"), 0), "checks");
  json_t *sa = json_object_get(json_array_get(checks, 0), "sources");
  assert_int_equal(json_array_size(sa), 2);
  assert_string_equal(json_string_value(json_array_get(sa, 1)),
                      "https://docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html");
  assert_null(json_object_get(json_array_get(checks, 2), "sources"));
  /* The detail stays the detail: the JSON keeps the URL in "sources". */
  assert_string_equal(json_string_value(json_object_get(json_array_get(checks, 0), "detail")), "The floor is 525.60.13.");
  json_decref(j);
  gc_report_free(r);
}

/* ----------------------------------------------------------- the commands --- */

static gc_report *run(gc_command_fn fn, const char *root, int expect_ok, ...) {
  char *argv[40];
  int argc = 0;
  va_list ap;
  va_start(ap, expect_ok);
  for (const char *a; (a = va_arg(ap, const char *)) && argc < 39;) argv[argc++] = (char *)a;
  va_end(ap);
  argv[argc] = NULL;
  gc_opts o = {0};
  o.root = root;
  gc_report *r = NULL;
  int rc = fn(argc, argv, &o, &r);
  if (expect_ok && rc != 0) fail_msg("%s %s: returned %d", argv[0], argc > 1 ? argv[1] : "", rc);
  return r;
}

static void check_run(const char *what, gc_report *r) {
  assert_non_null(r);
  expect_report_clean(what, r);
  gc_report_free(r);
}

/* explain: every code of the table, by number and by name. */
static void test_explain_every_code(void **state) {
  (void)state;
  int seen_url = 0;
  for (size_t i = 0; i < em_cuda_error_count(); i++) {
    const em_cuda_error_row *row = em_cuda_error_at(i);
    char num[16];
    snprintf(num, sizeof num, "%d", row->number);
    gc_report *r = run(gc_cmd_explain, NULL, 1, "explain", num, NULL);
    check_run(num, r);
    r = run(gc_cmd_explain, NULL, 1, "explain", row->name, NULL);
    assert_non_null(r);
    /* The description is cited from NVIDIA's API reference. */
    for (size_t k = 0; k < r->n; k++)
      for (size_t c = 0; c < r->sections[k].n; c++) {
        const gc_check *ck = &r->sections[k].checks[c];
        if (strstr(ck->id, ".causes") && ck->sources) seen_url = 1;
        if (!strchr(ck->id, '.') || strstr(ck->id, ".causes") || strstr(ck->id, ".check")) continue;
        if (!ck->sources || strncmp(ck->sources, "https://", 8)) fail_msg("%s: check %s cites no page", row->name, ck->id);
      }
    check_run(row->name, r);
  }
  assert_true(seen_url);
}

/* 209's causes cite a public thread; 804's NVIDIA's forward-compatibility page. */
static void test_explain_cites_threads(void **state) {
  (void)state;
  gc_report *r = run(gc_cmd_explain, NULL, 1, "explain", "209", NULL);
  int found = 0;
  for (size_t k = 0; k < r->n; k++)
    for (size_t c = 0; c < r->sections[k].n; c++)
      if (strstr(r->sections[k].checks[c].id, ".causes")) {
        assert_non_null(strstr(r->sections[k].checks[c].sources, "https://github.com/pytorch/pytorch/issues/59219"));
        assert_null(strstr(r->sections[k].checks[c].title, "anchors"));
        found = 1;
      }
  assert_true(found);
  json_t *codes = json_object_get(r->facts, "codes");
  assert_true(json_array_size(json_object_get(json_array_get(codes, 0), "sources")) >= 2);
  gc_report_free(r);
  r = run(gc_cmd_explain, NULL, 1, "explain", "804", NULL);
  found = 0;
  for (size_t k = 0; k < r->n; k++)
    for (size_t c = 0; c < r->sections[k].n; c++)
      if (strstr(r->sections[k].checks[c].id, ".causes")) {
        assert_non_null(strstr(r->sections[k].checks[c].sources, "forward-compatibility.html"));
        found = 1;
      }
  assert_true(found);
  gc_report_free(r);
}

/* The text output cites one URL per check, the first of the row's keys that
 * has one (cuda_errors.tsv's header): for the causes that must be a page that
 * shows them, not the API reference, which only lists the code (it is cited on
 * the description line already). NVML 999 and 18 once cited the NVML reference
 * for "systemctl daemon-reload" and "upgraded without a reboot". */
static const char *first_causes_url(const char *query, const char *id) {
  static char url[512];
  gc_report *r = run(gc_cmd_explain, NULL, 1, "explain", query, NULL);
  url[0] = '\0';
  for (size_t k = 0; k < r->n; k++)
    for (size_t c = 0; c < r->sections[k].n; c++) {
      const gc_check *ck = &r->sections[k].checks[c];
      if (!strcmp(ck->id, id) && ck->sources)
        snprintf(url, sizeof url, "%.*s", (int)strcspn(ck->sources, " "), ck->sources);
    }
  gc_report_free(r);
  return url;
}

static void test_explain_causes_cite_their_page(void **state) {
  (void)state;
  static const char *const refs[] = {"CUDA-DRV-TYPES", "CUDART-TYPES", "NVML-RETURN"};
  for (size_t i = 0; i < em_cuda_error_count(); i++) {
    const em_cuda_error_row *row = em_cuda_error_at(i);
    const char *first = em_source_url(row->source);
    if (!first || !row->causes[0]) continue;
    int first_is_ref = 0, other = 0;
    for (size_t k = 0; k < sizeof refs / sizeof *refs; k++) first_is_ref |= !strcmp(first, em_source_url(refs[k]));
    for (const char *p = row->source; *p;) {
      char key[64];
      size_t len = strcspn(p, ",");
      snprintf(key, sizeof key, "%.*s", (int)len, p);
      const char *u = em_source_url(key);
      other |= u && strcmp(u, first) != 0;
      p += len + (p[len] == ',');
    }
    if (first_is_ref && other)
      fail_msg("%s %d %s: its causes would cite the API reference %s before the page that shows them (%s)", row->api,
               row->number, row->name, first, row->source);
  }
  assert_string_equal(first_causes_url("NVML_ERROR_UNKNOWN", "nvml.999.causes"),
                      "https://github.com/NVIDIA/nvidia-container-toolkit/issues/48");
  assert_string_equal(first_causes_url("NVML_ERROR_LIB_RM_VERSION_MISMATCH", "nvml.18.causes"),
                      "https://github.com/lyulyul/shine-cluster/issues/30");
}

static void fixture(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/tests/fixtures/%s", src_dir, name); }

/* whatif: each rule, the classic cases of docs/gpucheck.md, and binaries. */
static void test_whatif_cases(void **state) {
  (void)state;
  char fb[PATH_MAX], cubin[PATH_MAX], ptx[PATH_MAX];
  fixture(fb, sizeof fb, "k_default.fatbin");
  fixture(cubin, sizeof cubin, "k_sm90a.cubin");
  fixture(ptx, sizeof ptx, "k_sm35_clang.ptx");
  const char *const cases[][16] = {
      {"--torch", "1.12.1+cu102", "--gpu", "A100", "--driver", "470.82.01"},
      {"--cuda-runtime", "12.4", "--driver", "535.104.05", "--gpu", "L4"},
      {"--gpu", "K80", "--cuda-runtime", "12.0", "--driver", "470.82.01"},
      {"--image-require", "cuda>=12.8 brand=tesla,driver>=535,driver<536", "--driver", "550.54.15", "--gpu", "RTX 4090",
       "--brand", "geforce"},
      {"--image-require", "cuda>=13.0", "--driver", "535.104.05", "--gpu", "T4", "--brand", "tesla", "--disable-require"},
      {"--image-require", "cuda>=12.2", "--driver", "535.104.05", "--gpu", "T4"},
      {"--cuda-runtime", "10.2", "--driver", "418.39", "--gpu", "V100"},
      {"--cuda-runtime", "12.8", "--driver", "520.61.05", "--gpu", "RTX 3090", "--brand", "geforce"},
      {"--cuda-runtime", "11.8", "--driver", "470", "--gpu", "RTX 4090"},
      {"--cuda-runtime", "13.0", "--driver", "580.65.06", "--gpu", "GTX 1080"},
      {"--cuda-runtime", "12.0", "--driver", "12.2", "--gpu", "RTX 5090"},
      {"--cuda-runtime", "12.6", "--driver", "560.35.03", "--gpu", "8.8"},
      {"--cuda-runtime", "12.4", "--driver", "550.54.15", "--gpu", "Jetson AGX Orin"},
      {"--torch", "2.9.0+cu130", "--gpu", "V100", "--gpu", "H100", "--driver", "575.51.03"},
      {"--torch", "2.8.0+cu129", "--gpu", "RTX 5090", "--driver", "570.124.06"},
      {"--torch", "2.7.0+cu128", "--gpu", "B200", "--driver", "570.124.06"},
      {"--torch", "2.5.1+cu124", "--gpu", "8.9", "--driver", "430.50"},
      {"--torch", "2.5.1+cpu", "--gpu", "A100"},
      {"--gpu", "GTX 1080", "--driver", "590.44.01"},
      {"--gpu", "H100", "--driver", "450.80.02"},
      {"--binary", fb, "--gpu", "RTX 5090", "--gpu", "T4", "--gpu", "H100", "--driver", "570.124.06"},
      {"--binary", cubin, "--binary", ptx, "--gpu", "H100", "--gpu", "K80", "--driver", "470.82.01"},
      {"--cuda-runtime", "12.4"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char *argv[20] = {"whatif"};
    int argc = 1;
    char label[400] = "whatif";
    for (size_t k = 0; k < 16 && cases[i][k]; k++) {
      argv[argc++] = (char *)cases[i][k];
      snprintf(label + strlen(label), sizeof label - strlen(label), " %.40s", cases[i][k]);
    }
    gc_opts o = {0};
    gc_report *r = NULL;
    int rc = gc_cmd_whatif(argc, argv, &o, &r);
    if (rc) fail_msg("%s: returned %d", label, rc);
    check_run(label, r);
  }
}

/* whatif's rules cite the pages that state them. */
static void test_whatif_cites_rules(void **state) {
  (void)state;
  gc_report *r = run(gc_cmd_whatif, NULL, 1, "whatif", "--cuda-runtime", "12.4", "--driver", "535.104.05", "--gpu", "L4",
                     NULL);
  static const struct {
    const char *id, *url;
  } want[] = {{"compat.minor", "minor-version-compatibility.html"},
              {"gpu0.ptx", "_ptx_utils.py"},
              {"driver.cuda", "cuda-toolkit-release-notes"}};
  for (size_t w = 0; w < sizeof want / sizeof *want; w++) {
    int found = 0;
    for (size_t k = 0; k < r->n; k++)
      for (size_t c = 0; c < r->sections[k].n; c++)
        if (!strcmp(r->sections[k].checks[c].id, want[w].id)) {
          found = 1;
          if (!r->sections[k].checks[c].sources || !strstr(r->sections[k].checks[c].sources, want[w].url))
            fail_msg("%s cites %s, expected %s", want[w].id, r->sections[k].checks[c].sources, want[w].url);
        }
    if (!found) fail_msg("no check %s", want[w].id);
  }
  gc_report_free(r);
  r = run(gc_cmd_whatif, NULL, 1, "whatif", "--image-require", "cuda>=12.8", "--driver", "550.54.15", "--gpu", "T4", NULL);
  int found = 0;
  for (size_t k = 0; k < r->n; k++)
    for (size_t c = 0; c < r->sections[k].n; c++)
      if (!strncmp(r->sections[k].checks[c].id, "image.require", 13)) {
        assert_non_null(strstr(r->sections[k].checks[c].sources, "libnvidia-container/blob/main/src/cli/dsl.c"));
        found = 1;
      }
  assert_true(found);
  gc_report_free(r);
}

/* inspect: the committed fixtures against old and new GPUs and drivers. */
static void test_inspect_fixtures(void **state) {
  (void)state;
  static const char *const files[] = {"k_default.fatbin", "k_all.fatbin",    "k_lz4.fatbin",  "k_fa.fatbin",
                                      "k_sm75.cubin",     "k_sm90a.cubin",   "k_sm100.cubin", "k_compute90.ptx",
                                      "k_compute90a.ptx", "k_sm35_clang.ptx", "k_rdc_sm80.cubin"};
  static const char *const drivers[] = {"470.82.01", "570.124.06", "580.65.06"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++)
    for (size_t d = 0; d < sizeof drivers / sizeof *drivers; d++) {
      char path[PATH_MAX], label[PATH_MAX + 64];
      fixture(path, sizeof path, files[i]);
      snprintf(label, sizeof label, "inspect %s --driver %s", files[i], drivers[d]);
      gc_report *r = run(gc_cmd_inspect, NULL, 1, "inspect", path, "--gpu", "K80", "--gpu", "T4", "--gpu", "RTX 3090",
                         "--gpu", "H100", "--gpu", "B200", "--gpu", "RTX 5090", "--driver", drivers[d], "--kernels", NULL);
      check_run(label, r);
    }
}

/* fleet: the hand-written reports of tests/fixtures/fleet, with and without a binary. */
static void test_fleet_fixtures(void **state) {
  (void)state;
  char k80[PATH_MAX], t4[PATH_MAX], h100[PATH_MAX], mixed[PATH_MAX], fb[PATH_MAX];
  fixture(k80, sizeof k80, "fleet/k80.json");
  fixture(t4, sizeof t4, "fleet/t4.json");
  fixture(h100, sizeof h100, "fleet/h100.json");
  fixture(mixed, sizeof mixed, "fleet/mixed.json");
  fixture(fb, sizeof fb, "k_default.fatbin");
  /* fleet also prints its table on stdout: that is output too. */
  char out[PATH_MAX];
  snprintf(out, sizeof out, "%s/fleet.out", tmp_dir);
  fflush(stdout);
  int saved = dup(1), fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_true(saved >= 0 && fd >= 0);
  dup2(fd, 1);
  close(fd);
  gc_report *r1 = run(gc_cmd_fleet, NULL, 0, "fleet", k80, t4, h100, mixed, NULL);
  gc_report *r2 = run(gc_cmd_fleet, NULL, 0, "fleet", k80, t4, h100, mixed, "--binary", fb, NULL);
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
  check_run("fleet", r1);
  check_run("fleet --binary", r2);
  FILE *f = fopen(out, "rb");
  assert_non_null(f);
  char table[16384];
  size_t n = fread(table, 1, sizeof table - 1, f);
  fclose(f);
  table[n] = '\0';
  assert_non_null(strstr(table, "HOST"));
  expect_clean("fleet table", table);
}

/* Host reports carry their citations into fleet: a host check's first URL
 * shows in the fleet line of that GPU. */
static void test_fleet_keeps_host_citation(void **state) {
  (void)state;
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/host.json", tmp_dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("{\"schema\":\"gpucheck/1\",\"command\":\"host\",\"verdict\":\"fail\",\"exit_code\":1,"
        "\"facts\":{\"hostname\":\"n1\",\"driver\":{\"kernel_module\":\"525.147.05\",\"cuda\":12000,\"state\":\"ok\"},"
        "\"gpus\":[{\"index\":0,\"name\":\"NVIDIA GeForce RTX 3090\",\"cc\":\"8.6\"}]},"
        "\"sections\":[{\"name\":\"Driver\",\"checks\":[{\"id\":\"driver.compat\",\"verdict\":\"fail\","
        "\"title\":\"Forward-compatibility libcuda on GPU0: cuInit returns 804\",\"detail\":\"a compat copy\","
        "\"fix\":\"take it off the loader path\",\"sources\":[\"https://docs.nvidia.com/deploy/cuda-compatibility/"
        "forward-compatibility.html\"]}]}]}\n",
        f);
  fclose(f);
  gc_report *r = run(gc_cmd_fleet, NULL, 0, "fleet", path, NULL);
  assert_non_null(r);
  int found = 0;
  for (size_t k = 0; k < r->n; k++)
    for (size_t c = 0; c < r->sections[k].n; c++)
      if (!strcmp(r->sections[k].checks[c].id, "host0.gpu0")) {
        assert_string_equal(r->sections[k].checks[c].sources,
                            "https://docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html");
        found = 1;
      }
  assert_true(found);
  check_run("fleet of a host report with sources", r);
}

/* host: an empty root (no driver at all), and the fake libcuda when the test runner provides it. */
static void test_host_runs(void **state) {
  (void)state;
  char root[PATH_MAX];
  snprintf(root, sizeof root, "%s/emptyroot", tmp_dir);
  mkdir(root, 0755);
  unsetenv("EMBER_LIBCUDA");
  em_shutdown();
  check_run("host --root (empty)", run(gc_cmd_host, root, 1, "host", NULL));
  const char *fake = getenv("FAKECUDA_LIB");
  if (!fake || !*fake) return;
  static const char *const fleets[][2] = {{"9.0=NVIDIA H100 80GB HBM3,3.7=Tesla K80", "12020"},
                                          {"7.5=Tesla T4", "11040"},
                                          {"12.0=NVIDIA GeForce RTX 5090", "13000"}};
  for (size_t i = 0; i < sizeof fleets / sizeof *fleets; i++) {
    setenv("EMBER_LIBCUDA", fake, 1);
    setenv("FAKECUDA_DEVICES", fleets[i][0], 1);
    setenv("FAKECUDA_DRIVER", fleets[i][1], 1);
    em_shutdown();
    check_run(fleets[i][0], run(gc_cmd_host, NULL, 1, "host", NULL));
    check_run(fleets[i][0], run(gc_cmd_host, root, 1, "host", NULL));
  }
  unsetenv("EMBER_LIBCUDA");
  unsetenv("FAKECUDA_DEVICES");
  unsetenv("FAKECUDA_DRIVER");
  em_shutdown();
}

/* ------------------------------------------------------ the string literals --- */

/* Checks the string literals of a C file (comments skipped: developers may
 * cite the notes there). Returns the number of literals seen. */
static int scan_literals(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot read %s: %s", path, strerror(errno));
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *src = malloc((size_t)n + 1), *lit = malloc((size_t)n + 1);
  assert_true(src && lit);
  assert_int_equal(fread(src, 1, (size_t)n, f), (size_t)n);
  src[n] = '\0';
  fclose(f);
  int count = 0, line = 1;
  for (long i = 0; i < n; i++) {
    if (src[i] == '\n') line++;
    if (src[i] == '/' && src[i + 1] == '*') {
      for (i += 2; i < n && !(src[i] == '*' && src[i + 1] == '/'); i++)
        if (src[i] == '\n') line++;
      i++;
    } else if (src[i] == '/' && src[i + 1] == '/') {
      while (i < n && src[i] != '\n') i++;
      line++;
    } else if (src[i] == '\'') {
      for (i++; i < n && src[i] != '\''; i++)
        if (src[i] == '\\') i++;
    } else if (src[i] == '"') {
      size_t k = 0;
      for (i++; i < n && src[i] != '"'; i++) {
        if (src[i] == '\\') lit[k++] = src[i++];
        lit[k++] = src[i];
      }
      lit[k] = '\0';
      count++;
      const char *o = offence(lit);
      if (o) fail_msg("%s:%d: a string literal %s", path, line, o);
    }
  }
  free(src);
  free(lit);
  return count;
}

static void scan_dir(const char *dir, int *files) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", src_dir, dir);
  DIR *d = opendir(path);
  if (!d) fail_msg("cannot open %s", path);
  for (struct dirent *e; (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    if (len < 3 || (strcmp(e->d_name + len - 2, ".c") && strcmp(e->d_name + len - 2, ".h"))) continue;
    char file[PATH_MAX + 256];
    snprintf(file, sizeof file, "%s/%s", path, e->d_name);
    scan_literals(file);
    (*files)++;
  }
  closedir(d);
}

static void test_string_literals(void **state) {
  (void)state;
  int files = 0;
  scan_dir("tools/gpucheck", &files);
  scan_dir("runtime", &files);
  scan_dir("arch_table", &files);
  assert_true(files > 20);
}

/* -------------------------------------------------------------- the group --- */

static int setup(void **state) {
  (void)state;
  const char *s = getenv("EMBER_SRC_DIR");
  if (s && *s) src_dir = s;
  const char *t = getenv("TMPDIR");
  snprintf(tmp_dir, sizeof tmp_dir, "%s/gc-sources-XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(tmp_dir)) return -1;
  unsetenv("GPUCHECK_ROOT");
  unsetenv("CUDA_VISIBLE_DEVICES");
  return 0;
}

static int teardown(void **state) {
  (void)state;
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
  return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rule_catches_the_old_citations),
      cmocka_unit_test(test_sources_table),
      cmocka_unit_test(test_error_table_texts),
      cmocka_unit_test(test_check_source),
      cmocka_unit_test(test_explain_every_code),
      cmocka_unit_test(test_explain_cites_threads),
      cmocka_unit_test(test_explain_causes_cite_their_page),
      cmocka_unit_test(test_whatif_cases),
      cmocka_unit_test(test_whatif_cites_rules),
      cmocka_unit_test(test_inspect_fixtures),
      cmocka_unit_test(test_fleet_fixtures),
      cmocka_unit_test(test_fleet_keeps_host_citation),
      cmocka_unit_test(test_host_runs),
      cmocka_unit_test(test_string_literals),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
