/* gpucheck fleet REPORT.json... [--binary FILE]: many hosts' `gpucheck
 * --json` reports (schema gpucheck/1, command host; tools/gpucheck/SCHEMA.md)
 * as one table of hosts x GPUs x verdicts.
 *
 * Without --binary a GPU's verdict is its host's own: the worst of the
 * report's checks about that GPU (ids "gpu<index>." ...) and of the checks
 * about the whole host (every id not naming a GPU). With --binary it is
 * whether that file's GPU code runs on the GPU's compute capability with the
 * host's driver (images.h), provided the host's driver works at all.
 *
 * Reports come from other machines: anything in them may be wrong. A report
 * that is not JSON, not gpucheck/1, not a host report or not shaped as the
 * schema says stops the command with exit 65 and a message naming the file
 * and the field; nothing in a report can crash it. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch_table.h"
#include "gpucheck.h"
#include "images.h"

#define MAX_REPORT_BYTES (64u << 20) /* a host report is a few kB; refuse what cannot be one */
#define MAX_GPUS 4096                /* per host: more is not a real machine */
#define TEXT 400

typedef struct fleet_gpu {
  int index;
  char name[128];      /* "" when the report has none */
  int cc;              /* 10*major+minor; 0 when the report has none */
  gc_verdict verdict;  /* the host's own verdict, or the binary's */
  char why[TEXT];      /* one line: the deciding check's title, or the binary's verdict */
  char detail[TEXT];   /* the deciding check's detail ("" if none) */
  char fix[TEXT];
  const char *run;     /* with --binary: "native", "ptx-jit", ... (SCHEMA.md); NULL otherwise */
  char source[TEXT];   /* the deciding check's first source URL, or sources.tsv keys with --binary; "" none */
  int source_is_keys;  /* 1: source holds keys for gc_check_source, 0: a URL */
  int good;            /* passes its host's checks (verdict not fail), or runs the binary (natively or by JIT) */
} fleet_gpu;

typedef struct fleet_host {
  char report[512];    /* the file it came from */
  char hostname[128];
  char label[192];     /* what the table shows: the host name, with the report's name if two hosts share it */
  char driver[64];     /* driver version string; "" when the report has none */
  int driver_cuda;     /* cuDriverGetVersion encoding; 0 when unknown */
  char driver_state[32]; /* "ok", "not-found", ...; "" when absent */
  fleet_gpu *gpus;
  size_t n_gpus;
  json_t *checks;      /* every check object of the report (array, owned) */
} fleet_host;

static void host_free(fleet_host *h) {
  free(h->gpus);
  json_decref(h->checks);
  memset(h, 0, sizeof *h);
}

/* Fixed buffers cut long strings, possibly inside a UTF-8 sequence, and a
 * file name may not be UTF-8 at all; JSON output needs valid UTF-8, so what
 * is not becomes '?' (a sequence cut at the end is dropped). */
static void utf8_clean(char *s) {
  unsigned char *p = (unsigned char *)s;
  while (*p) {
    int n = *p < 0x80 ? 0 : (*p & 0xE0) == 0xC0 ? 1 : (*p & 0xF0) == 0xE0 ? 2 : (*p & 0xF8) == 0xF0 ? 3 : -1;
    int ok = n >= 0;
    for (int k = 1; ok && k <= n; k++) ok = (p[k] & 0xC0) == 0x80;
    if (ok && n > 0) { /* no overlong forms, surrogates or code points past U+10FFFF */
      unsigned cp = n == 1 ? (p[0] & 0x1Fu) : n == 2 ? (p[0] & 0x0Fu) : (p[0] & 0x07u);
      for (int k = 1; k <= n; k++) cp = (cp << 6) | (p[k] & 0x3Fu);
      ok = (n == 1 ? cp >= 0x80 : n == 2 ? cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF) : cp >= 0x10000 && cp <= 0x10FFFF);
    }
    if (!ok) {
      int k = 1;
      while (k <= n && (p[k] & 0xC0) == 0x80) k++;
      if (n > 0 && k <= n && p[k] == 0) { /* a sequence cut by the end of the string */
        *p = 0;
        return;
      }
      *p++ = '?';
      continue;
    }
    p += n + 1;
  }
}

/* ---- reading one report ---- */

/* err gets "LABEL: what is wrong"; returns -1 for `return bad(...)`. */
static int bad(char *err, size_t cap, const char *label, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int bad(char *err, size_t cap, const char *label, const char *fmt, ...) {
  char what[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  snprintf(err, cap, "%s: %s", label, what);
  return -1;
}

static const char *json_kind(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a number with a fraction";
  case JSON_TRUE:
  case JSON_FALSE: return "a boolean";
  default: return "null";
  }
}

/* An optional string field: absent or null leaves out untouched ("" by the
 * caller); another type is an error. */
static int opt_string(const json_t *obj, const char *key, const char *where, char *out, size_t cap, char *err,
                      size_t err_cap, const char *label) {
  json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) return 0;
  if (!json_is_string(v))
    return bad(err, err_cap, label, "%s.%s is %s, expected a string or null", where, key, json_kind(v));
  snprintf(out, cap, "%s", json_string_value(v));
  return 0;
}

/* "9.0" / "12.0" -> 90 / 120; -1 for anything else. */
static int parse_cc(const char *s) {
  int major = 0, digits = 0;
  while (*s >= '0' && *s <= '9' && digits < 2) major = major * 10 + (*s++ - '0'), digits++;
  if (digits == 0 || major == 0 || s[0] != '.' || !(s[1] >= '0' && s[1] <= '9') || s[2] != '\0') return -1;
  return major * 10 + (s[1] - '0');
}

static int read_driver(const json_t *facts, fleet_host *h, char *err, size_t cap, const char *label) {
  json_t *d = json_object_get(facts, "driver");
  if (!d || json_is_null(d)) return 0;
  if (!json_is_object(d)) return bad(err, cap, label, "facts.driver is %s, expected an object", json_kind(d));
  char module[64] = "", libcuda[64] = "";
  if (opt_string(d, "kernel_module", "facts.driver", module, sizeof module, err, cap, label) ||
      opt_string(d, "libcuda_version", "facts.driver", libcuda, sizeof libcuda, err, cap, label) ||
      opt_string(d, "state", "facts.driver", h->driver_state, sizeof h->driver_state, err, cap, label))
    return -1;
  snprintf(h->driver, sizeof h->driver, "%s", module[0] ? module : libcuda);
  json_t *cuda = json_object_get(d, "cuda");
  if (cuda && !json_is_null(cuda)) {
    if (!json_is_integer(cuda) || json_integer_value(cuda) < 0 || json_integer_value(cuda) > 1000000)
      return bad(err, cap, label, "facts.driver.cuda is %s, expected an integer like 12040 (cuDriverGetVersion) or null",
                 json_is_integer(cuda) ? "out of range" : json_kind(cuda));
    h->driver_cuda = (int)json_integer_value(cuda);
  }
  return 0;
}

static int read_gpus(const json_t *facts, fleet_host *h, char *err, size_t cap, const char *label) {
  json_t *gpus = json_object_get(facts, "gpus");
  if (!gpus) return bad(err, cap, label, "facts.gpus is missing (a host report lists its GPUs, [] for none)");
  if (!json_is_array(gpus)) return bad(err, cap, label, "facts.gpus is %s, expected an array", json_kind(gpus));
  size_t n = json_array_size(gpus);
  if (n > MAX_GPUS) return bad(err, cap, label, "facts.gpus lists %zu GPUs; no host has more than %d", n, MAX_GPUS);
  h->gpus = calloc(n ? n : 1, sizeof *h->gpus);
  if (!h->gpus) return bad(err, cap, label, "out of memory for %zu GPUs", n);
  for (size_t i = 0; i < n; i++) {
    json_t *g = json_array_get(gpus, i);
    char where[48];
    snprintf(where, sizeof where, "facts.gpus[%zu]", i);
    if (!json_is_object(g)) return bad(err, cap, label, "%s is %s, expected an object", where, json_kind(g));
    fleet_gpu *out = &h->gpus[h->n_gpus];
    json_t *index = json_object_get(g, "index");
    if (!json_is_integer(index) || json_integer_value(index) < 0 || json_integer_value(index) > 65535)
      return bad(err, cap, label, "%s.index is %s, expected the GPU's index (an integer from 0)", where,
                 index ? (json_is_integer(index) ? "out of range" : json_kind(index)) : "missing");
    out->index = (int)json_integer_value(index);
    if (opt_string(g, "name", where, out->name, sizeof out->name, err, cap, label)) return -1;
    char cc[16] = "";
    if (opt_string(g, "cc", where, cc, sizeof cc, err, cap, label)) return -1;
    if (cc[0]) {
      out->cc = parse_cc(cc);
      if (out->cc < 0) return bad(err, cap, label, "%s.cc is \"%s\", expected a compute capability like \"9.0\"", where, cc);
    }
    h->n_gpus++;
  }
  return 0;
}

/* Keeps every check (with a valid id and verdict) for the verdicts later. */
static int read_checks(const json_t *root, fleet_host *h, char *err, size_t cap, const char *label) {
  json_t *sections = json_object_get(root, "sections");
  if (!json_is_array(sections))
    return bad(err, cap, label, "sections is %s, expected an array of sections with checks",
               sections ? json_kind(sections) : "missing");
  h->checks = json_array();
  for (size_t i = 0; i < json_array_size(sections); i++) {
    json_t *s = json_array_get(sections, i);
    json_t *checks = json_is_object(s) ? json_object_get(s, "checks") : NULL;
    if (!json_is_array(checks)) return bad(err, cap, label, "sections[%zu] has no array \"checks\"", i);
    for (size_t j = 0; j < json_array_size(checks); j++) {
      json_t *c = json_array_get(checks, j);
      json_t *id = json_is_object(c) ? json_object_get(c, "id") : NULL;
      json_t *verdict = json_is_object(c) ? json_object_get(c, "verdict") : NULL;
      gc_verdict v;
      if (!json_is_string(id)) return bad(err, cap, label, "sections[%zu].checks[%zu] has no string \"id\"", i, j);
      if (!json_is_string(verdict) || gc_verdict_parse(json_string_value(verdict), &v))
        return bad(err, cap, label, "sections[%zu].checks[%zu] (%s): verdict must be info, ok, warn or fail", i, j,
                   json_string_value(id));
      json_t *t = json_object_get(c, "title");
      if (t && !json_is_string(t))
        return bad(err, cap, label, "sections[%zu].checks[%zu] (%s): title is %s, expected a string", i, j,
                   json_string_value(id), json_kind(t));
      json_array_append(h->checks, c);
    }
  }
  return 0;
}

/* Parses one report's bytes into *h (zeroed first; host_free it after any
 * result). Returns 0, or -1 with "LABEL...: what is wrong" in err. */
static int fleet_parse(const char *label, const char *text, size_t len, fleet_host *h, char *err, size_t cap) {
  memset(h, 0, sizeof *h);
  snprintf(h->report, sizeof h->report, "%s", label);
  json_error_t je;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (!root)
    return snprintf(err, cap, "%s:%d:%d: not valid JSON: %s (expected the output of `gpucheck --json`)", label,
                    je.line, je.column, je.text),
           -1;
  int rc = -1;
  json_t *schema = json_object_get(root, "schema");
  json_t *command = json_object_get(root, "command");
  json_t *facts = json_object_get(root, "facts");
  if (!json_is_object(root)) {
    bad(err, cap, label, "the document is %s, expected a gpucheck report object", json_kind(root));
  } else if (!json_is_string(schema)) {
    bad(err, cap, label, "no \"schema\" string: not a gpucheck --json report");
  } else if (strcmp(json_string_value(schema), GC_SCHEMA)) {
    const char *s = json_string_value(schema);
    if (!strncmp(s, "gpucheck/", 9))
      bad(err, cap, label, "schema \"%s\" is not %s, the one this gpucheck reads: use the same gpucheck version on "
                           "every host",
          s, GC_SCHEMA);
    else
      bad(err, cap, label, "schema \"%s\" is not %s: not a gpucheck report", s, GC_SCHEMA);
  } else if (!json_is_string(command) || strcmp(json_string_value(command), "host")) {
    bad(err, cap, label, "a report of command \"%s\"; fleet reads host reports (run `gpucheck --json` on each host)",
        json_is_string(command) ? json_string_value(command) : "?");
  } else if (!json_is_object(facts)) {
    bad(err, cap, label, "facts is %s, expected an object", facts ? json_kind(facts) : "missing");
  } else if (opt_string(facts, "hostname", "facts", h->hostname, sizeof h->hostname, err, cap, label) == 0 &&
             read_driver(facts, h, err, cap, label) == 0 && read_gpus(facts, h, err, cap, label) == 0 &&
             read_checks(root, h, err, cap, label) == 0) {
    if (!h->hostname[0]) { /* a report without a host name: the file's name stands in */
      const char *base = strrchr(label, '/');
      snprintf(h->hostname, sizeof h->hostname, "%s", base ? base + 1 : label);
    }
    utf8_clean(h->report), utf8_clean(h->hostname), utf8_clean(h->driver), utf8_clean(h->driver_state);
    snprintf(h->label, sizeof h->label, "%s", h->hostname);
    for (size_t i = 0; i < h->n_gpus; i++) utf8_clean(h->gpus[i].name);
    rc = 0;
  }
  json_decref(root);
  return rc;
}

static int fleet_read_file(const char *path, fleet_host *h, char *err, size_t cap) {
  memset(h, 0, sizeof *h);
  FILE *f = fopen(path, "rb");
  if (!f) return snprintf(err, cap, "%s: cannot open: %s", path, strerror(errno)), -1;
  char *buf = NULL;
  size_t n = 0, alloc = 0;
  for (;;) {
    if (n == alloc) {
      if (alloc >= MAX_REPORT_BYTES) {
        fclose(f);
        free(buf);
        return snprintf(err, cap, "%s: larger than %u MiB: not a gpucheck report", path, MAX_REPORT_BYTES >> 20), -1;
      }
      alloc = alloc ? alloc * 2 : 65536;
      char *t = realloc(buf, alloc);
      if (!t) {
        fclose(f);
        free(buf);
        return snprintf(err, cap, "%s: out of memory", path), -1;
      }
      buf = t;
    }
    size_t got = fread(buf + n, 1, alloc - n, f);
    if (got == 0) break;
    n += got;
  }
  int io = ferror(f);
  fclose(f);
  if (io) {
    free(buf);
    return snprintf(err, cap, "%s: read error", path), -1;
  }
  int rc = fleet_parse(path, buf ? buf : "", n, h, err, cap);
  free(buf);
  return rc;
}

/* ---- verdicts ---- */

/* The GPU index a check id names, or -1 for a host-wide check: a check is
 * about GPU N when a dot-separated part of its id is "gpuN" ("gpu3",
 * "gpu3.arch", "ember.gpu3"). */
static int check_gpu(const char *id) {
  for (const char *p = id; p; p = strchr(p, '.'), p = p ? p + 1 : NULL) {
    if (strncmp(p, "gpu", 3) || !(p[3] >= '0' && p[3] <= '9')) continue;
    int n = 0;
    const char *q = p + 3;
    while (*q >= '0' && *q <= '9' && n < 100000) n = n * 10 + (*q++ - '0');
    if (*q == '.' || *q == '\0') return n;
  }
  return -1;
}

static const char *str_field(const json_t *c, const char *key) {
  json_t *v = json_object_get(c, key);
  return json_is_string(v) ? json_string_value(v) : NULL;
}

/* The host's own verdict for one GPU: its worst check, a GPU's own check
 * before a host-wide one of the same verdict. INFO counts as ok. */
static void host_verdict(const fleet_host *h, fleet_gpu *g) {
  const json_t *worst = NULL;
  gc_verdict wv = GC_OK;
  int worst_own = 0;
  for (size_t i = 0; i < json_array_size(h->checks); i++) {
    const json_t *c = json_array_get(h->checks, i);
    int gpu = check_gpu(str_field(c, "id"));
    if (gpu >= 0 && gpu != g->index) continue;
    gc_verdict v;
    if (gc_verdict_parse(str_field(c, "verdict"), &v)) continue;
    if (v == GC_INFO) v = GC_OK;
    int own = gpu >= 0;
    if (!worst || v > wv || (v == wv && own && !worst_own && v > GC_OK)) {
      worst = c, wv = v, worst_own = own;
    }
  }
  g->verdict = wv;
  g->good = wv != GC_FAIL;
  if (wv <= GC_OK) {
    snprintf(g->why, sizeof g->why, "every check of the host report is ok");
    return;
  }
  const char *title = str_field(worst, "title"), *detail = str_field(worst, "detail"), *fix = str_field(worst, "fix");
  snprintf(g->why, sizeof g->why, "%s (%s)", title ? title : str_field(worst, "id"), str_field(worst, "id"));
  snprintf(g->detail, sizeof g->detail, "%s", detail ? detail : "");
  snprintf(g->fix, sizeof g->fix, "%s", fix ? fix : "run `gpucheck` on the host for details");
  /* The host check's citation travels with its detail. */
  json_t *src = json_object_get(worst, "sources");
  if (json_is_array(src) && json_is_string(json_array_get(src, 0)))
    snprintf(g->source, sizeof g->source, "%s", json_string_value(json_array_get(src, 0)));
}

/* Whether the binary's code runs on one GPU of a host, and what to change if not. */
static void binary_verdict(const fleet_host *h, fleet_gpu *g, const gc_image_set *set, const char *binary) {
  char v1[16], v2[16];
  if (h->driver_state[0] && strcmp(h->driver_state, "ok")) {
    g->verdict = GC_FAIL;
    snprintf(g->why, sizeof g->why, "the host's CUDA driver is not usable (driver.state %s): nothing runs there",
             h->driver_state);
    snprintf(g->fix, sizeof g->fix, "run `gpucheck` on %s and fix its driver first", h->label);
    return;
  }
  if (!h->driver_cuda || !g->cc) {
    g->verdict = GC_WARN;
    snprintf(g->why, sizeof g->why, "the report lacks the %s: cannot tell", !g->cc ? "GPU's compute capability"
                                                                                     : "driver's CUDA version");
    snprintf(g->fix, sizeof g->fix, "run `gpucheck --json` on %s again with a working driver", h->label);
    return;
  }
  gc_run_verdict v;
  memset(&v, 0, sizeof v);
  v.image = -1;
  gc_images_verdict(set, g->cc, h->driver_cuda, &v);
  g->run = gc_run_key(v.run);
  g->good = v.run == GC_RUN_NATIVE || v.run == GC_RUN_PTX_JIT;
  if (gc_run_sources(v.run)) snprintf(g->source, sizeof g->source, "%s", gc_run_sources(v.run)), g->source_is_keys = 1;
  snprintf(g->why, sizeof g->why, "%.40s: %.350s", gc_run_name(v.run), v.why);
  const gc_image *img = v.image >= 0 && (size_t)v.image < set->n ? &set->images[v.image] : NULL;
  switch (v.run) {
  case GC_RUN_NATIVE:
    g->verdict = GC_OK;
    break;
  case GC_RUN_PTX_JIT:
    g->verdict = GC_WARN;
    snprintf(g->fix, sizeof g->fix, "runs, but the driver JIT-compiles the PTX at first launch (slow start, cached): "
                                    "add a cubin for sm_%d to %s to avoid it", g->cc, binary);
    break;
  case GC_RUN_NO_IMAGE: {
    g->verdict = GC_FAIL;
    /* Current nvcc cannot build for a retired architecture: name the last toolkit that can. */
    const em_arch_row *arch = em_arch_lookup(g->cc);
    char last[48] = "";
    if (arch && arch->last_toolkit) snprintf(last, sizeof last, "a CUDA %s or older toolkit and ", gc_cuda_str(arch->last_toolkit, v1));
    snprintf(g->fix, sizeof g->fix, "rebuild %s with %s-gencode arch=compute_%d,code=sm_%d (or add PTX for a CC <= %d.%d), "
                                    "or run it on another host (`gpucheck explain 209`)",
             binary, last, g->cc, g->cc, g->cc / 10, g->cc % 10);
    break;
  }
  case GC_RUN_CUBIN_TOO_NEW: {
    g->verdict = GC_FAIL;
    int need = img && img->toolkit ? em_cubin_min_driver(img->toolkit) : 0;
    const char *floor = need ? em_mvc_floor_linux(need / 1000) : NULL;
    snprintf(g->fix, sizeof g->fix, "upgrade the driver on %s to one supporting CUDA %s%s%s%s (it supports %s), or "
                                    "rebuild %s with a CUDA %d toolkit",
             h->label, need ? gc_cuda_str(need, v1) : "of the cubin's toolkit", floor ? " (Linux >= " : "",
             floor ? floor : "", floor ? ")" : "", gc_cuda_str(h->driver_cuda, v2), binary, h->driver_cuda / 1000);
    break;
  }
  case GC_RUN_PTX_TOO_NEW: {
    g->verdict = GC_FAIL;
    int need = img ? em_ptx_isa_min_driver(img->ptx_isa) : 0;
    snprintf(g->fix, sizeof g->fix, "upgrade the driver on %s to one supporting CUDA %s (it supports %s), or add a "
                                    "cubin for sm_%d to %s (`gpucheck explain 222`)",
             h->label, need ? gc_cuda_str(need, v1) : "of the PTX's toolkit", gc_cuda_str(h->driver_cuda, v2),
             g->cc, binary);
    break;
  }
  }
}

/* ---- output ---- */

static const char *verdict_word(const fleet_gpu *g, int with_binary) {
  if (!with_binary) return g->verdict == GC_FAIL ? "fail" : g->verdict == GC_WARN ? "warn" : "ok";
  return g->verdict == GC_FAIL ? "no" : g->verdict == GC_WARN ? (g->run ? "yes (JIT)" : "unknown") : "yes";
}

static void driver_text(const fleet_host *h, char *out, size_t cap) {
  char v[16];
  if (h->driver[0] && h->driver_cuda) snprintf(out, cap, "%s (%s)", h->driver, gc_cuda_str(h->driver_cuda, v));
  else if (h->driver[0]) snprintf(out, cap, "%s", h->driver);
  else if (h->driver_cuda) snprintf(out, cap, "CUDA %s", gc_cuda_str(h->driver_cuda, v));
  else snprintf(out, cap, "%s", h->driver_state[0] ? h->driver_state : "unknown");
}

static void cc_text(int cc, char out[16]) {
  if (cc > 0 && cc < 1000) snprintf(out, 16, "%d.%d", cc / 10, cc % 10);
  else snprintf(out, 16, "?");
}

/* The human table: host, GPU, name, CC, driver, verdict, why. */
static void print_table(FILE *f, const fleet_host *hosts, size_t n, int with_binary, const char *summary) {
  const char *const head[] = {"HOST", "GPU", "NAME", "CC", "DRIVER", with_binary ? "RUNS" : "VERDICT"};
  size_t w[6];
  for (int c = 0; c < 6; c++) w[c] = strlen(head[c]);
  char drv[96], cc[16], idx[16];
  for (size_t i = 0; i < n; i++) {
    driver_text(&hosts[i], drv, sizeof drv);
    size_t lens[6] = {strlen(hosts[i].label), 1, 0, 1, strlen(drv), 0};
    for (size_t k = 0; k < hosts[i].n_gpus || (k == 0 && hosts[i].n_gpus == 0); k++) {
      const fleet_gpu *g = hosts[i].n_gpus ? &hosts[i].gpus[k] : NULL;
      snprintf(idx, sizeof idx, "%d", g ? g->index : 0);
      cc_text(g ? g->cc : 0, cc);
      lens[1] = g ? strlen(idx) : 1;
      lens[2] = g ? strlen(g->name) : 6;
      lens[3] = strlen(cc);
      lens[5] = g ? strlen(verdict_word(g, with_binary)) : 2;
      for (int c = 0; c < 6; c++)
        if (lens[c] > w[c]) w[c] = lens[c] > 40 ? 40 : lens[c];
    }
  }
  fprintf(f, "%-*s  %-*s  %-*s  %-*s  %-*s  %-*s  WHY\n", (int)w[0], head[0], (int)w[1], head[1], (int)w[2], head[2],
          (int)w[3], head[3], (int)w[4], head[4], (int)w[5], head[5]);
  for (size_t i = 0; i < n; i++) {
    const fleet_host *h = &hosts[i];
    driver_text(h, drv, sizeof drv);
    if (h->n_gpus == 0) {
      fprintf(f, "%-*.40s  %-*s  %-*s  %-*s  %-*.40s  %-*s  the report lists no GPU\n", (int)w[0], h->label,
              (int)w[1], "-", (int)w[2], "(none)", (int)w[3], "-", (int)w[4], drv, (int)w[5], "no");
      continue;
    }
    for (size_t k = 0; k < h->n_gpus; k++) {
      const fleet_gpu *g = &h->gpus[k];
      cc_text(g->cc, cc);
      snprintf(idx, sizeof idx, "%d", g->index);
      const char *why = g->verdict == GC_OK && !with_binary ? "-" : g->why;
      fprintf(f, "%-*.40s  %-*s  %-*.40s  %-*s  %-*.40s  %-*s  %s\n", (int)w[0], h->label, (int)w[1], idx,
              (int)w[2], g->name[0] ? g->name : "?", (int)w[3], cc, (int)w[4], drv, (int)w[5],
              verdict_word(g, with_binary), why);
    }
  }
  fprintf(f, "\n%s\n\n", summary);
}

/* A host runs the binary (or passes) when it has GPUs and every one does;
 * "some" when only part of them. A GPU the report leaves in doubt does not count. */
static void host_counts(const fleet_host *h, int *all, int *some) {
  size_t good = 0;
  for (size_t k = 0; k < h->n_gpus; k++) good += h->gpus[k].good != 0;
  *all = h->n_gpus > 0 && good == h->n_gpus;
  *some = good > 0 && good < h->n_gpus;
}

static void add_host(gc_report *rep, size_t i, const fleet_host *h, int with_binary, json_t *hosts_json) {
  char drv[96], title[700], cc[16], id[48];
  driver_text(h, drv, sizeof drv);
  snprintf(title, sizeof title, "%s (%s): driver %s", h->hostname, h->report, drv);
  gc_section *s = gc_section_add(rep, title);
  json_t *gpus = json_array();
  if (h->n_gpus == 0) {
    snprintf(id, sizeof id, "host%zu.gpus", i);
    gc_check *c = gc_check_add(s, GC_FAIL, id, "no GPU in the report of %s", h->label);
    gc_check_detail(c, "the host's gpucheck saw no GPU (driver %s)", drv);
    gc_check_fix(c, "run `gpucheck` on %s: it says why no GPU is visible", h->label);
  }
  for (size_t k = 0; k < h->n_gpus; k++) {
    const fleet_gpu *g = &h->gpus[k];
    cc_text(g->cc, cc);
    snprintf(id, sizeof id, "host%zu.gpu%d", i, g->index);
    gc_check *c = gc_check_add(s, g->verdict, id, "GPU %d %s (CC %s): %s", g->index, g->name[0] ? g->name : "?", cc,
                               with_binary ? verdict_word(g, 1) : gc_verdict_name(g->verdict));
    gc_check_detail(c, "%s%s%s", g->why, g->detail[0] ? ": " : "", g->detail);
    if (g->source_is_keys) gc_check_source(c, g->source);
    else gc_check_source_url(c, g->source);
    if (g->fix[0]) gc_check_fix(c, "%s", g->fix);
    json_t *gj = json_pack("{s:i, s:s, s:s}", "index", g->index, "verdict", gc_verdict_name(g->verdict), "why", g->why);
    json_object_set_new(gj, "name", g->name[0] ? json_string(g->name) : json_null());
    json_object_set_new(gj, "cc", g->cc ? json_string(cc) : json_null());
    if (g->run) json_object_set_new(gj, "run", json_string(g->run));
    if (g->detail[0]) json_object_set_new(gj, "detail", json_string(g->detail));
    if (g->fix[0]) json_object_set_new(gj, "fix", json_string(g->fix));
    json_array_append_new(gpus, gj);
  }
  json_t *hj = json_pack("{s:s, s:s, s:o}", "hostname", h->hostname, "report", h->report, "gpus", gpus);
  json_object_set_new(hj, "driver", h->driver[0] ? json_string(h->driver) : json_null());
  json_object_set_new(hj, "driver_cuda", h->driver_cuda ? json_integer(h->driver_cuda) : json_null());
  json_object_set_new(hj, "driver_state", h->driver_state[0] ? json_string(h->driver_state) : json_null());
  int all, some;
  host_counts(h, &all, &some);
  json_object_set_new(hj, with_binary ? "can_run" : "passes", json_boolean(all));
  json_object_set_new(hj, "some_gpus", json_boolean(some));
  json_array_append_new(hosts_json, hj);
}

/* ---- the command ---- */

static int usage(const char *why) {
  fprintf(stderr, "gpucheck fleet: %s\nusage: gpucheck fleet REPORT.json... [--binary FILE]\n"
                  "  each REPORT.json is the output of `gpucheck --json` on one host\n",
          why);
  return GC_EXIT_USAGE;
}

int gc_cmd_fleet(int argc, char **argv, const gc_opts *o, gc_report **out) {
  *out = NULL;
  const char *binary = NULL;
  const char **files = calloc((size_t)(argc > 0 ? argc : 1), sizeof *files);
  if (!files) return GC_EXIT_INTERNAL;
  size_t n_files = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = NULL;
    if (!strcmp(a, "--binary")) {
      if (i + 1 >= argc) return free(files), usage("--binary needs a file");
      val = argv[++i];
    } else if (!strncmp(a, "--binary=", 9)) {
      val = a + 9;
    } else if (a[0] == '-' && a[1]) {
      char why[300];
      snprintf(why, sizeof why, "unknown option '%s'", a);
      return free(files), usage(why);
    } else {
      files[n_files++] = a;
      continue;
    }
    if (binary) return free(files), usage("--binary given twice");
    if (!*val) return free(files), usage("--binary needs a file");
    binary = val;
  }
  if (n_files == 0) return free(files), usage("no report given");

  fleet_host *hosts = calloc(n_files, sizeof *hosts);
  if (!hosts) return free(files), GC_EXIT_INTERNAL;
  int bad_input = 0;
  char err[1200];
  for (size_t i = 0; i < n_files; i++) {
    if (fleet_read_file(files[i], &hosts[i], err, sizeof err)) {
      fprintf(stderr, "gpucheck fleet: %s\n", err);
      bad_input = 1;
    }
  }
  gc_image_set set;
  memset(&set, 0, sizeof set);
  if (!bad_input && binary && gc_images_read(binary, &set, err, sizeof err)) {
    fprintf(stderr, "gpucheck fleet: --binary %s\n", err);
    bad_input = 1;
  }
  if (bad_input) {
    for (size_t i = 0; i < n_files; i++) host_free(&hosts[i]);
    free(hosts);
    free(files);
    gc_images_free(&set);
    return GC_EXIT_INPUT;
  }

  /* Hosts sharing a name (reports of one machine, or hosts without a real
   * name) are told apart by their report's file name. */
  for (size_t i = 0; i < n_files; i++)
    for (size_t j = 0; j < n_files; j++)
      if (i != j && !strcmp(hosts[i].hostname, hosts[j].hostname)) {
        const char *base = strrchr(hosts[i].report, '/');
        snprintf(hosts[i].label, sizeof hosts[i].label, "%s (%s)", hosts[i].hostname, base ? base + 1 : hosts[i].report);
        utf8_clean(hosts[i].label);
        break;
      }

  int can = 0, partly = 0;
  for (size_t i = 0; i < n_files; i++) {
    for (size_t k = 0; k < hosts[i].n_gpus; k++) {
      fleet_gpu *g = &hosts[i].gpus[k];
      if (binary) binary_verdict(&hosts[i], g, &set, binary);
      else host_verdict(&hosts[i], g);
      utf8_clean(g->why), utf8_clean(g->detail), utf8_clean(g->fix);
    }
    int all, some;
    host_counts(&hosts[i], &all, &some);
    can += all;
    partly += some;
  }
  char summary[1200];
  int len = binary ? snprintf(summary, sizeof summary, "%d of %zu hosts can run %s", can, n_files, binary)
                   : snprintf(summary, sizeof summary, "%d of %zu hosts pass their own checks on every GPU", can, n_files);
  if (partly && len > 0 && (size_t)len < sizeof summary)
    snprintf(summary + len, sizeof summary - (size_t)len, " (%d more on some of their GPUs: restrict those with "
                                                          "CUDA_VISIBLE_DEVICES)",
             partly);

  gc_report *rep = gc_report_new("fleet");
  if (!rep) {
    for (size_t i = 0; i < n_files; i++) host_free(&hosts[i]);
    free(hosts), free(files);
    gc_images_free(&set);
    return GC_EXIT_INTERNAL;
  }
  json_t *hosts_json = json_array();
  for (size_t i = 0; i < n_files; i++) add_host(rep, i, &hosts[i], binary != NULL, hosts_json);
  gc_section *s = gc_section_add(rep, "Fleet");
  gc_check *c = gc_check_add(s, GC_INFO, "fleet.summary", "%s", summary);
  gc_check_set(c, "hosts", json_integer((json_int_t)n_files));
  gc_check_set(c, "can_run", json_integer(can));
  gc_check_set(c, "some_gpus", json_integer(partly));
  json_object_set_new(rep->facts, "hosts", hosts_json);
  json_object_set_new(rep->facts, "binary", binary ? json_string(binary) : json_null());
  json_object_set_new(rep->facts, "summary", json_pack("{s:i, s:i, s:i}", "hosts", (int)n_files, "can_run", can,
                                                       "some_gpus", partly));
  /* The table is the overview; the checklist main prints after it gives each
   * GPU's reason and fix. */
  if (!o->json) print_table(stdout, hosts, n_files, binary != NULL, summary);

  for (size_t i = 0; i < n_files; i++) host_free(&hosts[i]);
  free(hosts);
  free(files);
  gc_images_free(&set);
  *out = rep;
  return 0;
}
