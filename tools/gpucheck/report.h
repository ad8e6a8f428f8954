/* gpucheck's report: sections of checks, each with a verdict, a reason and a
 * fix, rendered as a checklist for people or as JSON (schema gpucheck/1) for
 * machines and `gpucheck fleet`. */
#ifndef GPUCHECK_REPORT_H
#define GPUCHECK_REPORT_H

#include <jansson.h>
#include <stdio.h>

/* Exit codes (documented in docs/gpucheck.md). */
#define GC_EXIT_OK 0       /* every check ok */
#define GC_EXIT_FAIL 1     /* something will fail */
#define GC_EXIT_WARN 2     /* warnings only */
#define GC_EXIT_USAGE 64   /* bad command line */
#define GC_EXIT_INPUT 65   /* unreadable or malformed input (file, JSON report) */
#define GC_EXIT_INTERNAL 70

#define GC_SCHEMA "gpucheck/1"

typedef enum gc_verdict { GC_INFO = 0, GC_OK = 1, GC_WARN = 2, GC_FAIL = 3 } gc_verdict;

typedef struct gc_check {
  gc_verdict verdict;
  char *id;          /* stable machine name: "driver.version", "gpu0.arch" */
  char *title;       /* one line: what was checked and the outcome */
  char *detail;      /* why (may be NULL) */
  char *fix;         /* what to do (may be NULL; expected for warn and fail) */
  json_t *data;      /* structured facts of this check (object, may be NULL) */
  char *sources;     /* the pages that back the detail, space-separated URLs (may be NULL) */
} gc_check;

typedef struct gc_section {
  char *name;
  gc_check *checks;
  size_t n, cap;
} gc_section;

typedef struct gc_report {
  char *command;     /* "host", "inspect", "whatif", "explain", "fleet" */
  gc_section *sections;
  size_t n, cap;
  json_t *facts;     /* command-specific structured data (object), see docs */
} gc_report;

gc_report *gc_report_new(const char *command);
void gc_report_free(gc_report *r);
gc_section *gc_section_add(gc_report *r, const char *name);
/* Adds a check; the title is printf-formatted. Returns it for detail/fix/data. */
gc_check *gc_check_add(gc_section *s, gc_verdict v, const char *id, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void gc_check_detail(gc_check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void gc_check_fix(gc_check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Cites the sources behind a check's detail: a comma-separated list of
 * arch_table sources.tsv keys ("MVC", or a data row's source column). Keys
 * with a url add it (once); keys without one (local experiments, research
 * notes) add nothing, so a check never cites a file the user cannot open.
 * The text output ends the why line with "(source: URL)" of the first url;
 * the JSON lists every url in the check's "sources". */
void gc_check_source(gc_check *c, const char *keys);
/* The same with a URL already resolved (one from another report). */
void gc_check_source_url(gc_check *c, const char *url);
/* Takes ownership of a JSON value under key in c->data. */
void gc_check_set(gc_check *c, const char *key, json_t *value);

gc_verdict gc_report_worst(const gc_report *r);
int gc_report_exit_code(const gc_report *r);
const char *gc_verdict_name(gc_verdict v); /* "info", "ok", "warn", "fail" */
int gc_verdict_parse(const char *s, gc_verdict *out);

/* Human output: a ✅/⚠️/❌ checklist (plain [ok]/[warn]/[FAIL] marks and no
 * colour when color is 0). */
void gc_report_print(const gc_report *r, FILE *out, int color);
/* JSON output (new reference). */
json_t *gc_report_json(const gc_report *r);

#endif
