/* The report model and its two renderings (report.h). */
#include "report.h"

#include "arch_table.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static char *vformat(const char *fmt, va_list ap) {
  char *s = NULL;
  if (vasprintf(&s, fmt, ap) < 0) return NULL;
  return s;
}

gc_report *gc_report_new(const char *command) {
  gc_report *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->command = strdup(command);
  r->facts = json_object();
  return r;
}

void gc_report_free(gc_report *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n; i++) {
    gc_section *s = &r->sections[i];
    for (size_t j = 0; j < s->n; j++) {
      gc_check *c = &s->checks[j];
      free(c->id), free(c->title), free(c->detail), free(c->fix), free(c->sources);
      json_decref(c->data);
    }
    free(s->checks);
    free(s->name);
  }
  free(r->sections);
  free(r->command);
  json_decref(r->facts);
  free(r);
}

gc_section *gc_section_add(gc_report *r, const char *name) {
  if (r->n == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 8;
    gc_section *t = realloc(r->sections, cap * sizeof *t);
    if (!t) return NULL;
    r->sections = t;
    r->cap = cap;
  }
  gc_section *s = &r->sections[r->n++];
  memset(s, 0, sizeof *s);
  s->name = strdup(name);
  return s;
}

gc_check *gc_check_add(gc_section *s, gc_verdict v, const char *id, const char *fmt, ...) {
  static gc_check sink; /* absorbs calls after an allocation failure */
  if (!s) return &sink;
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 8;
    gc_check *t = realloc(s->checks, cap * sizeof *t);
    if (!t) return &sink;
    s->checks = t;
    s->cap = cap;
  }
  gc_check *c = &s->checks[s->n++];
  memset(c, 0, sizeof *c);
  c->verdict = v;
  c->id = strdup(id);
  va_list ap;
  va_start(ap, fmt);
  c->title = vformat(fmt, ap);
  va_end(ap);
  return c;
}

void gc_check_detail(gc_check *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  free(c->detail);
  c->detail = vformat(fmt, ap);
  va_end(ap);
}

void gc_check_fix(gc_check *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  free(c->fix);
  c->fix = vformat(fmt, ap);
  va_end(ap);
}

void gc_check_source_url(gc_check *c, const char *url) {
  if (!c->id || !url || !url[0] || strchr(url, ' ')) return; /* the sink; nothing; not one URL */
  size_t n = strlen(url);
  for (const char *p = c->sources; p && *p;) { /* once */
    size_t len = strcspn(p, " ");
    if (len == n && !strncmp(p, url, n)) return;
    p += len + (p[len] == ' ');
  }
  size_t have = c->sources ? strlen(c->sources) : 0;
  char *t = realloc(c->sources, have + (have ? 1 : 0) + n + 1);
  if (!t) return;
  if (have) t[have++] = ' ';
  memcpy(t + have, url, n + 1);
  c->sources = t;
}

static void add_url(const char *url, void *ctx) { gc_check_source_url(ctx, url); }

void gc_check_source(gc_check *c, const char *keys) { em_source_urls(keys, add_url, c); }

void gc_check_set(gc_check *c, const char *key, json_t *value) {
  if (!c->id) { /* the sink */
    json_decref(value);
    return;
  }
  if (!c->data) c->data = json_object();
  json_object_set_new(c->data, key, value);
}

gc_verdict gc_report_worst(const gc_report *r) {
  gc_verdict w = GC_INFO;
  for (size_t i = 0; i < r->n; i++)
    for (size_t j = 0; j < r->sections[i].n; j++)
      if (r->sections[i].checks[j].verdict > w) w = r->sections[i].checks[j].verdict;
  return w;
}

int gc_report_exit_code(const gc_report *r) {
  switch (gc_report_worst(r)) {
  case GC_FAIL: return GC_EXIT_FAIL;
  case GC_WARN: return GC_EXIT_WARN;
  default: return GC_EXIT_OK;
  }
}

static const char *const verdict_names[] = {"info", "ok", "warn", "fail"};

const char *gc_verdict_name(gc_verdict v) { return (unsigned)v < 4 ? verdict_names[v] : "?"; }

int gc_verdict_parse(const char *s, gc_verdict *out) {
  for (int i = 0; i < 4; i++)
    if (s && !strcmp(s, verdict_names[i])) {
      *out = (gc_verdict)i;
      return 0;
    }
  return -1;
}

/* Marks: emoji with colour on a terminal, ASCII otherwise (logs, pipes). */
static const char *mark(gc_verdict v, int color) {
  static const char *const fancy[] = {"\033[36mℹ️ \033[0m", "\033[32m✅\033[0m", "\033[33m⚠️ \033[0m", "\033[31m❌\033[0m"};
  static const char *const plain[] = {"[info]", "[ok]  ", "[warn]", "[FAIL]"};
  return color ? fancy[v] : plain[v];
}

void gc_report_print(const gc_report *r, FILE *out, int color) {
  for (size_t i = 0; i < r->n; i++) {
    const gc_section *s = &r->sections[i];
    fprintf(out, "%s%s%s\n", color ? "\033[1m" : "", s->name, color ? "\033[0m" : "");
    for (size_t j = 0; j < s->n; j++) {
      const gc_check *c = &s->checks[j];
      fprintf(out, "  %s %s\n", mark(c->verdict, color), c->title ? c->title : "");
      /* One URL per check keeps the line readable; the JSON has them all. The
       * citation goes before the detail's final full stop. */
      int first = c->sources ? (int)strcspn(c->sources, " ") : 0;
      size_t dl = c->detail ? strlen(c->detail) : 0;
      int stop = dl && c->detail[dl - 1] == '.';
      if (c->detail && first)
        fprintf(out, "         why: %.*s (source: %.*s)%s\n", (int)(dl - (size_t)stop), c->detail, first, c->sources,
                stop ? "." : "");
      else if (c->detail) fprintf(out, "         why: %s\n", c->detail);
      else if (first) fprintf(out, "         source: %.*s\n", first, c->sources);
      if (c->fix) fprintf(out, "         fix: %s\n", c->fix);
    }
    fputc('\n', out);
  }
  gc_verdict w = gc_report_worst(r);
  fprintf(out, "%s\n", w == GC_FAIL   ? "Verdict: something will fail (exit 1)."
                       : w == GC_WARN ? "Verdict: warnings only (exit 2)."
                                      : "Verdict: all ok (exit 0).");
}

json_t *gc_report_json(const gc_report *r) {
  json_t *sections = json_array();
  for (size_t i = 0; i < r->n; i++) {
    const gc_section *s = &r->sections[i];
    json_t *checks = json_array();
    for (size_t j = 0; j < s->n; j++) {
      const gc_check *c = &s->checks[j];
      json_t *o = json_pack("{s:s, s:s, s:s}", "id", c->id ? c->id : "", "verdict", gc_verdict_name(c->verdict),
                            "title", c->title ? c->title : "");
      if (c->detail) json_object_set_new(o, "detail", json_string(c->detail));
      if (c->fix) json_object_set_new(o, "fix", json_string(c->fix));
      if (c->sources) {
        json_t *a = json_array();
        for (const char *p = c->sources; *p;) {
          size_t len = strcspn(p, " ");
          json_array_append_new(a, json_stringn(p, len));
          p += len + (p[len] == ' ');
        }
        json_object_set_new(o, "sources", a);
      }
      if (c->data) json_object_set(o, "data", c->data);
      json_array_append_new(checks, o);
    }
    json_array_append_new(sections, json_pack("{s:s, s:o}", "name", s->name, "checks", checks));
  }
  return json_pack("{s:s, s:s, s:s, s:i, s:O, s:o}", "schema", GC_SCHEMA, "command", r->command, "verdict",
                   gc_verdict_name(gc_report_worst(r)), "exit_code", gc_report_exit_code(r), "facts", r->facts,
                   "sections", sections);
}
