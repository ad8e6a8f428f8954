/* gpucheck explain CODE|NAME|MESSAGE: what a CUDA driver (CUresult), runtime
 * (cudaError_t) or NVML error means, its usual causes and what to check.
 *
 * The query may be a number ("209"), a name of either API in any case
 * ("CUDA_ERROR_NO_BINARY_FOR_GPU", "cudaerrornokernelimagefordevice"), part of
 * a name ("NoKernelImage"), or the text a user pastes ("RuntimeError: CUDA
 * error: no kernel image is available for execution on the device"). The
 * knowledge is arch_table's error table (arch_table/data/cuda_errors.tsv);
 * this file only finds rows and lays them out. The answer is informational
 * (exit 0); a code Ember does not know is a negative answer (a fail check,
 * exit 1); no query at all is a usage error (64). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "arch_table.h"
#include "gpucheck.h"

#define MAX_QUERY 4096
#define MAX_GROUPS 32       /* distinct codes one query can name */
#define MAX_CANDIDATES 25   /* shown when a partial query names many codes */

/* How the query was understood (facts.matched_by). */
typedef enum how { HOW_NONE, HOW_NUMBER, HOW_NAME, HOW_MESSAGE, HOW_PARTIAL } how;
static const char *const how_names[] = {"none", "number", "name", "message", "partial"};

/* One code as users meet it: driver and runtime share the number and the
 * meaning (rows of both APIs together); an NVML code is a group of its own. */
typedef struct group {
  int nvml;
  int number;
} group;

typedef struct matches {
  group g[MAX_GROUPS];
  size_t n;
  size_t more; /* groups that matched but did not fit */
} matches;

static void add_group(matches *m, const em_cuda_error_row *row) {
  group want = {!strcmp(row->api, "nvml"), row->number};
  for (size_t i = 0; i < m->n; i++)
    if (m->g[i].nvml == want.nvml && m->g[i].number == want.number) return;
  if (m->n < MAX_GROUPS) m->g[m->n++] = want;
  else m->more++;
}

/* ---- reading the query ---- */

/* Lower-case letters and digits only: "CUDA_ERROR_NO_BINARY" and
 * "cudaErrorNoBinary" both become "cudaerrornobinary". */
static void squash(const char *in, char *out, size_t cap) {
  size_t n = 0;
  for (; *in && n + 1 < cap; in++)
    if (isalnum((unsigned char)*in)) out[n++] = (char)tolower((unsigned char)*in);
  out[n] = '\0';
}

/* Lower case, runs of white space as one space, no white space or final
 * period at either end: how pasted messages are compared. */
static void fold_text(const char *in, char *out, size_t cap) {
  size_t n = 0;
  int space = 0;
  for (; *in && n + 1 < cap; in++) {
    unsigned char c = (unsigned char)*in;
    if (isspace(c)) {
      space = n > 0;
      continue;
    }
    if (space && n + 2 < cap) out[n++] = ' ';
    space = 0;
    out[n++] = (char)tolower(c);
  }
  while (n > 0 && (out[n - 1] == '.' || out[n - 1] == ' ')) n--;
  out[n] = '\0';
}

/* The arguments joined by spaces, without surrounding quotes users paste
 * along ("'no kernel image ...'"). 0, or -1 if it is too long. */
static int join_query(int argc, char **argv, char *q, size_t cap) {
  q[0] = '\0';
  size_t n = 0;
  for (int i = 1; i < argc; i++) {
    size_t len = strlen(argv[i]);
    if (n + len + 2 > cap) return -1;
    if (n) q[n++] = ' ';
    memcpy(q + n, argv[i], len + 1);
    n += len;
  }
  char *s = q;
  while (isspace((unsigned char)*s)) s++;
  size_t len = strlen(s);
  while (len > 0 && isspace((unsigned char)s[len - 1])) len--;
  if (len >= 2 && (s[0] == '"' || s[0] == '\'') && s[len - 1] == s[0]) {
    s++;
    len -= 2;
  }
  memmove(q, s, len);
  q[len] = '\0';
  /* The query goes into titles and JSON, which must be UTF-8: a pasted
   * line in another encoding keeps its ASCII and loses the rest. */
  json_t *probe = json_string(q);
  if (!probe)
    for (char *p = q; *p; p++)
      if ((unsigned char)*p >= 0x80) *p = '?';
  json_decref(probe);
  return 0;
}

/* A whole-query decimal number; -1 if the query is anything else. */
static int whole_number(const char *q) {
  if (!*q) return -1;
  long v = 0;
  for (const char *p = q; *p; p++) {
    if (!isdigit((unsigned char)*p) || p - q >= 9) return -1;
    v = v * 10 + (*p - '0');
  }
  return (int)v;
}

static void add_number(matches *m, int number) {
  for (size_t i = 0; i < em_cuda_error_count(); i++)
    if (em_cuda_error_at(i)->number == number) add_group(m, em_cuda_error_at(i));
}

/* Names written inside a longer text ("failed call to cuInit:
 * CUDA_ERROR_NO_DEVICE: ..."): every identifier-like word that is a name. */
static void names_in_text(const char *q, matches *m) {
  const char *p = q;
  while (*p) {
    while (*p && !(isalnum((unsigned char)*p) || *p == '_')) p++;
    const char *start = p;
    while (isalnum((unsigned char)*p) || *p == '_') p++;
    size_t len = (size_t)(p - start);
    if (len == 0 || len >= 80) continue;
    char word[80];
    memcpy(word, start, len);
    word[len] = '\0';
    const em_cuda_error_row *row = em_cuda_error_by_name(word);
    if (row) add_group(m, row);
  }
}

/* The longest known message that the pasted text contains: "RuntimeError:
 * CUDA error: no kernel image is available for execution on the device"
 * names 209. Codes whose messages are equally long all count. */
static void messages_in_text(const char *folded, matches *m) {
  size_t best = 0;
  char msg[512];
  for (size_t i = 0; i < em_cuda_error_count(); i++) {
    fold_text(em_cuda_error_at(i)->message, msg, sizeof msg);
    size_t len = strlen(msg);
    if (len >= 8 && len >= best && strstr(folded, msg)) {
      if (len > best) m->n = m->more = 0;
      best = len;
      add_group(m, em_cuda_error_at(i));
    }
  }
}

/* Numbers inside a text ("cuda driver library init failure: 802", "CUDA
 * error 209"), not parts of versions or names ("12.2", "sm_90"): used only
 * when every such number that is a known code is the same one. */
static void number_in_text(const char *q, matches *m) {
  int found = -1;
  for (const char *p = q; *p; p++) {
    if (!isdigit((unsigned char)*p) || (p > q && (isalnum((unsigned char)p[-1]) || p[-1] == '.' || p[-1] == '_'))) continue;
    const char *e = p;
    long v = 0;
    while (isdigit((unsigned char)*e) && e - p < 9) v = v * 10 + (*e++ - '0');
    int clean_end = !(isalnum((unsigned char)*e) || *e == '_' || (*e == '.' && isdigit((unsigned char)e[1])));
    p = e - 1;
    if (!clean_end) {
      while (isalnum((unsigned char)p[1]) || p[1] == '.' || p[1] == '_') p++;
      continue;
    }
    int known = 0;
    for (size_t i = 0; i < em_cuda_error_count(); i++) known |= em_cuda_error_at(i)->number == v;
    if (!known) continue;
    if (found >= 0 && found != v) return; /* two different codes: not ours to pick */
    found = (int)v;
  }
  if (found >= 0) add_number(m, found);
}

/* Part of a name ("NoKernelImage", "no_binary") or of a message or
 * description ("insufficient for CUDA runtime"). */
static void partial(const char *q, const char *folded, matches *m) {
  char sq[MAX_QUERY], name[128], text[1024];
  squash(q, sq, sizeof sq);
  size_t sqlen = strlen(sq);
  for (size_t i = 0; i < em_cuda_error_count(); i++) {
    const em_cuda_error_row *row = em_cuda_error_at(i);
    squash(row->name, name, sizeof name);
    int hit = sqlen >= 3 && strstr(name, sq);
    if (!hit && strlen(folded) >= 4) {
      fold_text(row->message, text, sizeof text);
      hit = strstr(text, folded) != NULL;
      if (!hit) {
        fold_text(row->description, text, sizeof text);
        hit = strstr(text, folded) != NULL;
      }
    }
    if (hit) add_group(m, row);
  }
}

static how resolve(const char *q, matches *m) {
  memset(m, 0, sizeof *m);
  int n = whole_number(q);
  if (n >= 0) {
    add_number(m, n);
    return m->n ? HOW_NUMBER : HOW_NONE;
  }
  const em_cuda_error_row *row = em_cuda_error_by_name(q);
  if (row) {
    add_group(m, row);
    return HOW_NAME;
  }
  names_in_text(q, m);
  if (m->n) return HOW_NAME;
  char folded[MAX_QUERY];
  fold_text(q, folded, sizeof folded);
  messages_in_text(folded, m);
  if (m->n) return HOW_MESSAGE;
  number_in_text(q, m);
  if (m->n) return HOW_NUMBER;
  partial(q, folded, m);
  return m->n ? HOW_PARTIAL : HOW_NONE;
}

/* ---- the report ---- */

static json_t *pains_json(const char *pains) {
  json_t *a = json_array();
  const char *p = pains;
  while (*p) {
    size_t len = strcspn(p, ",");
    json_array_append_new(a, json_stringn(p, len));
    p += len;
    if (*p == ',') p++;
  }
  return a;
}

static json_t *text_or_null(const char *s) { return s[0] ? json_string(s) : json_null(); }

/* The NVIDIA reference page of an API's codes (sources.tsv keys). */
static const char *api_source(const char *api) {
  if (!strcmp(api, "driver")) return "CUDA-DRV-TYPES";
  if (!strcmp(api, "runtime")) return "CUDART-TYPES";
  return "NVML-RETURN";
}

/* Appends url to the JSON array ctx unless it is there already. */
static void append_new_url(const char *url, void *ctx) {
  json_t *a = ctx;
  for (size_t i = 0; i < json_array_size(a); i++)
    if (!strcmp(json_string_value(json_array_get(a, i)), url)) return;
  json_array_append_new(a, json_string(url));
}

/* Every url behind a row: its API's reference page, then the row's own sources. */
static json_t *sources_json(const em_cuda_error_row *r) {
  json_t *a = json_array();
  em_source_urls(api_source(r->api), append_new_url, a);
  em_source_urls(r->source, append_new_url, a);
  return a;
}

static json_t *row_json(const em_cuda_error_row *r) {
  char conf[2] = {r->conf, '\0'};
  return json_pack("{s:s, s:i, s:s, s:s, s:o, s:o, s:o, s:o, s:s, s:s, s:o}", "api", r->api, "number", r->number,
                   "name", r->name, "description", r->description, "message", text_or_null(r->message), "causes",
                   text_or_null(r->causes), "check", text_or_null(r->check), "pains", pains_json(r->pains), "conf",
                   conf, "source", r->source, "sources", sources_json(r));
}

static const char *api_label(const char *api) {
  if (!strcmp(api, "driver")) return "driver API, CUresult";
  if (!strcmp(api, "runtime")) return "runtime API, cudaError_t";
  return "NVML, nvmlReturn_t";
}

/* The rows of a group: driver then runtime, or the NVML row. */
static size_t group_rows(const group *g, const em_cuda_error_row *rows[2]) {
  size_t n = 0;
  if (g->nvml) {
    rows[n] = em_cuda_error_lookup("nvml", g->number);
    if (rows[n]) n++;
    return n;
  }
  rows[n] = em_cuda_error_lookup("driver", g->number);
  if (rows[n]) n++;
  rows[n] = em_cuda_error_lookup("runtime", g->number);
  if (rows[n]) n++;
  return n;
}

static const char *conf_note(char conf) {
  if (conf == 'S') return " [conf S: from user reports and secondary sources]";
  if (conf == 'U') return " [conf U: unconfirmed]";
  return "";
}

/* "Usual causes" and "What to check" of one text (shared by both APIs when
 * the rows say the same, else one pair per API). */
static void add_advice(gc_section *s, const char *idbase, const em_cuda_error_row *r, const char *label) {
  char id[64];
  snprintf(id, sizeof id, "%s.causes", idbase);
  gc_check *c = gc_check_add(s, GC_INFO, id, "Usual causes%s%s", label, conf_note(r->conf));
  gc_check_detail(c, "%s", r->causes);
  /* The row's sources: an NVIDIA page or a public issue thread that shows these causes. */
  gc_check_source(c, r->source);
  gc_check_set(c, "source", json_string(r->source));
  snprintf(id, sizeof id, "%s.check", idbase);
  c = gc_check_add(s, GC_INFO, id, "What to check%s", label);
  gc_check_fix(c, "%s", r->check);
}

static void explain_group(gc_report *rep, const group *g, json_t *codes) {
  const em_cuda_error_row *rows[2];
  size_t n = group_rows(g, rows);
  if (n == 0) return;
  char title[512];
  if (n == 2)
    snprintf(title, sizeof title, "%d: %s (driver API) = %s (runtime API)", g->number, rows[0]->name, rows[1]->name);
  else if (!g->nvml)
    snprintf(title, sizeof title, "%d: %s (%s; the %s API has no code %d)", g->number, rows[0]->name,
             api_label(rows[0]->api), strcmp(rows[0]->api, "driver") ? "driver" : "runtime", g->number);
  else
    snprintf(title, sizeof title, "%d: %s (%s, from nvidia-smi or NVML)", g->number, rows[0]->name, api_label("nvml"));
  gc_section *s = gc_section_add(rep, title);

  for (size_t i = 0; i < n; i++) {
    const em_cuda_error_row *r = rows[i];
    char id[64];
    snprintf(id, sizeof id, "%s.%d", r->api, r->number);
    /* Driver and runtime usually describe a shared code in the same words: say them once. */
    const char *desc = i > 0 && !strcmp(r->description, rows[0]->description) ? "The same." : r->description;
    gc_check *c;
    if (r->message[0])
      c = gc_check_add(s, GC_INFO, id, "%s: %s Message: \"%s\"", r->name, desc, r->message);
    else
      c = gc_check_add(s, GC_INFO, id, "%s: %s", r->name, desc);
    /* The description is the header's doc comment, which NVIDIA's API reference shows. */
    gc_check_source(c, api_source(r->api));
    gc_check_set(c, "api", json_string(r->api));
    gc_check_set(c, "number", json_integer(r->number));
    gc_check_set(c, "name", json_string(r->name));
    json_array_append_new(codes, row_json(r));
  }

  int shared = n == 2 && rows[0]->causes[0] && rows[1]->causes[0] && !strcmp(rows[0]->causes, rows[1]->causes) &&
               !strcmp(rows[0]->check, rows[1]->check);
  char idbase[32];
  if (shared) {
    snprintf(idbase, sizeof idbase, "cuda.%d", g->number);
    add_advice(s, idbase, rows[0], "");
    return;
  }
  int any = 0;
  for (size_t i = 0; i < n; i++) {
    if (!rows[i]->causes[0]) continue;
    char label[48] = "";
    if (n == 2) snprintf(label, sizeof label, " (%s API)", rows[i]->api);
    snprintf(idbase, sizeof idbase, "%s.%d", rows[i]->api, g->number);
    add_advice(s, idbase, rows[i], label);
    any = 1;
  }
  if (!any) {
    snprintf(idbase, sizeof idbase, "%s.%d.causes", g->nvml ? "nvml" : "cuda", g->number);
    gc_check *c = gc_check_add(s, GC_INFO, idbase, "Ember has no notes on this code beyond the header's description");
    gc_check_fix(c, "search the CUDA documentation for %s; `gpucheck` checks the driver, the GPUs and the libraries "
                    "this process would load",
                 rows[0]->name);
  }
}

static void list_candidates(gc_report *rep, const char *q, const matches *m, json_t *codes) {
  gc_section *s = gc_section_add(rep, "Several codes match");
  gc_check *c = gc_check_add(s, GC_INFO, "explain.ambiguous", "'%s' matches %zu codes%s", q, m->n + m->more,
                             m->more ? " (the first ones below)" : "");
  gc_check_fix(c, "give the number or more of the name, e.g. `gpucheck explain %d`", m->g[0].number);
  for (size_t i = 0; i < m->n && i < MAX_CANDIDATES; i++) {
    const em_cuda_error_row *rows[2];
    size_t n = group_rows(&m->g[i], rows);
    if (n == 0) continue;
    char id[48];
    snprintf(id, sizeof id, "candidate.%s.%d", m->g[i].nvml ? "nvml" : "cuda", m->g[i].number);
    gc_check_add(s, GC_INFO, id, "%d: %s%s%s: %s", m->g[i].number, rows[0]->name, n == 2 ? " = " : "",
                 n == 2 ? rows[1]->name : "", rows[0]->description);
    for (size_t k = 0; k < n; k++) json_array_append_new(codes, row_json(rows[k]));
  }
}

/* Other libraries' status enums look like CUDA errors but are not. */
static const char *other_library(const char *q) {
  static const struct {
    const char *prefix, *what;
  } libs[] = {{"CUBLAS_STATUS", "a cuBLAS status (cublasStatus_t)"}, {"CUDNN_STATUS", "a cuDNN status (cudnnStatus_t)"},
              {"NCCL", "an NCCL result (ncclResult_t)"},             {"NVRTC_ERROR", "an NVRTC result (nvrtcResult)"},
              {"CUFFT_", "a cuFFT result (cufftResult)"},            {"CUSPARSE_STATUS", "a cuSPARSE status"},
              {"CURAND_STATUS", "a cuRAND status"},                  {"CUSOLVER_STATUS", "a cuSOLVER status"}};
  for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++)
    if (!strncasecmp(q, libs[i].prefix, strlen(libs[i].prefix))) return libs[i].what;
  return NULL;
}

static void unknown(gc_report *rep, const char *q) {
  gc_section *s = gc_section_add(rep, "CUDA error code");
  gc_check *c = gc_check_add(s, GC_FAIL, "explain.unknown", "'%s' is not a CUDA error code Ember knows", q);
  char nvml[64] = "";
  for (size_t i = 0; i < em_cuda_error_count(); i++) {
    const em_cuda_error_row *r = em_cuda_error_at(i);
    if (strcmp(r->api, "nvml") || strlen(nvml) + 8 >= sizeof nvml) continue;
    snprintf(nvml + strlen(nvml), sizeof nvml - strlen(nvml), "%s%d", nvml[0] ? ", " : "", r->number);
  }
  const char *lib = other_library(q);
  if (lib)
    gc_check_detail(c, "it looks like %s, which has its own codes: see that library's documentation", lib);
  else
    gc_check_detail(c, "Ember knows every CUresult (driver API) and cudaError_t (runtime API) of CUDA 13.0 and the "
                       "NVML codes %s, by number, by name (whole or in part) and by the runtime's message text",
                    nvml);
  gc_check_fix(c, "give the number or the name as the program printed it, e.g. `gpucheck explain 209` or `gpucheck "
                  "explain CUDA_ERROR_NO_BINARY_FOR_GPU`, or paste the message; cuBLAS, cuDNN, NCCL, NVRTC and cuFFT "
                  "statuses are not CUDA error codes");
}

int gc_cmd_explain(int argc, char **argv, const gc_opts *o, gc_report **out) {
  (void)o;
  *out = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strncmp(argv[i], "--", 2)) {
      fprintf(stderr, "gpucheck explain: unknown option '%s'\nusage: gpucheck explain CODE|NAME|MESSAGE\n", argv[i]);
      return GC_EXIT_USAGE;
    }
  }
  char q[MAX_QUERY];
  if (join_query(argc, argv, q, sizeof q) < 0) {
    fprintf(stderr, "gpucheck explain: the query is longer than %d bytes; give the code, its name or the error line\n",
            MAX_QUERY - 1);
    return GC_EXIT_USAGE;
  }
  if (!q[0]) {
    fprintf(stderr, "usage: gpucheck explain CODE|NAME|MESSAGE\n"
                    "  e.g. gpucheck explain 209, gpucheck explain cudaErrorInsufficientDriver,\n"
                    "       gpucheck explain \"no kernel image is available for execution on the device\"\n");
    return GC_EXIT_USAGE;
  }

  matches m;
  how h = resolve(q, &m);
  gc_report *rep = gc_report_new("explain");
  if (!rep) return GC_EXIT_INTERNAL;
  json_t *codes = json_array();
  /* A number names at most a CUDA code and an NVML code: explain both. Other
   * queries are explained in full when they name one or two codes. */
  if (h == HOW_NONE) {
    unknown(rep, q);
  } else if (h == HOW_NUMBER || m.n + m.more <= 2) {
    for (size_t i = 0; i < m.n; i++) explain_group(rep, &m.g[i], codes);
  } else {
    list_candidates(rep, q, &m, codes);
  }
  json_object_set_new(rep->facts, "query", json_string(q));
  json_object_set_new(rep->facts, "matched_by", json_string(how_names[h]));
  json_object_set_new(rep->facts, "ambiguous", json_boolean(h != HOW_NONE && h != HOW_NUMBER && m.n + m.more > 2));
  json_object_set_new(rep->facts, "codes", codes);
  *out = rep;
  return 0;
}
