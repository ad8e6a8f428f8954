/* `ember checkpoint inspect FILE [--json]`: what a checkpoint holds, read
 * through the public API (include/ember/checkpoint.h): the manifest, the
 * sections with their offsets, sizes and checksums (all verified), the
 * settings `ember train` saved with the run, and the graph's parameters and
 * states (name, dtype, shape, element count).
 *
 * Exit codes: 0 the file is a whole checkpoint and everything in it was
 * read; 1 it was refused (damaged, truncated, not a checkpoint, a newer
 * format, unreadable: the message names the file, the section and the byte
 * offset) or its graph cannot be built by this build (the manifest and the
 * sections are printed first); 64 usage error. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checkpoint_cmd.h"
#include "ember.h"

#define EXIT_USAGE 64

static const char USAGE[] =
  "usage: ember checkpoint inspect FILE [--json]\n"
  "\n"
  "Prints what the checkpoint FILE holds: its manifest (format version, when it\n"
  "was written, by which Ember, on which device, in which numeric mode), its\n"
  "sections with offsets, sizes and XXH3-64 checksums (every checksum is checked:\n"
  "a damaged, truncated or foreign file is refused, naming the section and the\n"
  "byte offset), the settings of the run when `ember train` wrote it (what\n"
  "--resume continues with), and the model's parameters and states (name,\n"
  "dtype, shape, count). --json prints one JSON object instead.\n"
  "\n"
  "Exit codes: 0 read whole; 1 refused, or the graph cannot be built by this\n"
  "build (the rest is printed); 64 usage error.\n";

static int usage(FILE *to, int rc) {
  fputs(USAGE, to);
  return rc;
}

static void device_label(const em_checkpoint_manifest *m, char *buf, size_t cap) {
  if (m->device.kind == EM_DEVICE_CUDA) snprintf(buf, cap, "cuda:%d", m->device.ordinal);
  else snprintf(buf, cap, "cpu");
}

static void utc(int64_t t, char *buf, size_t cap) {
  time_t tt = (time_t)t;
  struct tm tm;
  if (!gmtime_r(&tt, &tm) || !strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm)) snprintf(buf, cap, "?");
}

/* One leaf: name, dtype, shape and element count, as JSON. */
static json_t *leaf_json(const em_graph *g, em_var v, int64_t *count) {
  const char *name = NULL;
  em_dtype dt;
  int nd;
  int64_t shape[EM_MAX_DIMS];
  em_var_name(g, v, &name);
  if (em_var_info(g, v, &dt, &nd, shape)) return NULL;
  json_t *dims = json_array();
  int64_t n = 1;
  for (int i = 0; i < nd; i++) {
    json_array_append_new(dims, json_integer(shape[i]));
    n *= shape[i];
  }
  *count = n;
  return json_pack("{s:s, s:s, s:o, s:I}", "name", name ? name : "", "dtype", em_dtype_name(dt), "shape", dims,
                   "count", (json_int_t)n);
}

/* The parameters or the states of g as a JSON array; *total their elements. */
static json_t *leaves_json(const em_graph *g, int states, int64_t *total) {
  size_t n = 0;
  *total = 0;
  json_t *a = json_array();
  if (states ? em_graph_states(g, NULL, 0, &n) : em_graph_parameters(g, NULL, 0, &n)) return a;
  em_var *vars = malloc(sizeof *vars * (n ? n : 1));
  if (!vars) return a;
  if (!(states ? em_graph_states(g, vars, n, &n) : em_graph_parameters(g, vars, n, &n)))
    for (size_t i = 0; i < n; i++) {
      int64_t c = 0;
      json_t *l = leaf_json(g, vars[i], &c);
      if (l) json_array_append_new(a, l);
      *total += c;
    }
  free(vars);
  return a;
}

/* Everything the checkpoint says, as one JSON object (graph_error: why the
 * graph could not be built, or null). */
static json_t *describe(const char *file, const em_checkpoint *c, const char *graph_error) {
  em_checkpoint_manifest m;
  em_checkpoint_get_manifest(c, &m);
  char dev[32], when[32];
  device_label(&m, dev, sizeof dev);
  utc(m.created, when, sizeof when);
  json_t *sections = json_array();
  for (size_t i = 0; i < em_checkpoint_section_count(c); i++) {
    em_checkpoint_section_info s;
    if (em_checkpoint_section_get(c, i, &s)) continue;
    char sum[17];
    snprintf(sum, sizeof sum, "%016llx", (unsigned long long)s.checksum);
    json_array_append_new(sections, json_pack("{s:s, s:I, s:I, s:s, s:b}", "name", s.name, "offset",
                                              (json_int_t)s.offset, "size", (json_int_t)s.size, "xxh3_64", sum,
                                              "checksum_ok", 1));
  }
  json_t *o = json_pack("{s:s, s:i, s:I, s:s, s:s, s:s, s:s, s:s, s:I, s:o}", "file", file, "format_version",
                        (int)m.format_version, "created", (json_int_t)m.created, "created_utc", when, "ember_version",
                        m.ember_version, "device", dev, "device_name", m.device_name, "mode",
                        m.mode == EM_MODE_PORTABLE ? "portable" : "fast", "file_size", (json_int_t)m.file_size,
                        "sections", sections);
  const em_graph *g = em_checkpoint_graph(c);
  if (g) {
    int64_t np, ns;
    json_object_set_new(o, "parameters", leaves_json(g, 0, &np));
    json_object_set_new(o, "parameter_count", json_integer(np));
    json_object_set_new(o, "states", leaves_json(g, 1, &ns));
    json_object_set_new(o, "state_count", json_integer(ns));
  }
  json_object_set_new(o, "graph_error", graph_error ? json_string(graph_error) : json_null());
  /* `ember train`'s settings of the run (its section "ember-train", JSON):
   * what --resume will continue with. Another writer's bytes under that
   * name are shown as absent rather than trusted. */
  const void *b;
  size_t n;
  json_t *run = NULL;
  if (!em_checkpoint_find(c, "ember-train", &b, &n)) run = json_loadb(b, n, 0, NULL);
  if (run && !json_is_object(run)) {
    json_decref(run);
    run = NULL;
  }
  json_object_set_new(o, "training_settings", run ? run : json_null());
  return o;
}

static void print_leaves(const char *what, json_t *a, json_t *total) {
  printf("%s (%zu, %lld values):\n", what, json_array_size(a), (long long)json_integer_value(total));
  size_t i;
  json_t *l;
  json_array_foreach(a, i, l) {
    char shape[160] = "[";
    size_t k;
    json_t *d;
    json_array_foreach(json_object_get(l, "shape"), k, d) {
      size_t len = strlen(shape);
      snprintf(shape + len, sizeof shape - len, "%s%lld", k ? ", " : "", (long long)json_integer_value(d));
    }
    strncat(shape, "]", sizeof shape - strlen(shape) - 1);
    printf("  %-40s %-5s %-20s %lld\n", json_string_value(json_object_get(l, "name")),
           json_string_value(json_object_get(l, "dtype")), shape,
           (long long)json_integer_value(json_object_get(l, "count")));
  }
}

static void print_text(json_t *o) {
  printf("checkpoint %s\n", json_string_value(json_object_get(o, "file")));
  printf("  format version  %lld\n", (long long)json_integer_value(json_object_get(o, "format_version")));
  printf("  created         %s\n", json_string_value(json_object_get(o, "created_utc")));
  printf("  written by      Ember %s\n", json_string_value(json_object_get(o, "ember_version")));
  const char *dev = json_string_value(json_object_get(o, "device")),
             *name = json_string_value(json_object_get(o, "device_name"));
  if (strcmp(dev, name)) printf("  device          %s (%s)\n", dev, name);
  else printf("  device          %s\n", dev);
  printf("  mode            %s\n", json_string_value(json_object_get(o, "mode")));
  printf("  size            %lld bytes\n", (long long)json_integer_value(json_object_get(o, "file_size")));
  json_t *secs = json_object_get(o, "sections");
  printf("sections (%zu; every checksum verified, and the whole file's):\n", json_array_size(secs));
  printf("  %-24s %12s %12s  %-16s\n", "name", "offset", "size", "xxh3-64");
  size_t i;
  json_t *s;
  json_array_foreach(secs, i, s) {
    printf("  %-24s %12lld %12lld  %s ok\n", json_string_value(json_object_get(s, "name")),
           (long long)json_integer_value(json_object_get(s, "offset")),
           (long long)json_integer_value(json_object_get(s, "size")),
           json_string_value(json_object_get(s, "xxh3_64")));
  }
  json_t *run = json_object_get(o, "training_settings");
  if (json_is_object(run)) {
    char *text = json_dumps(run, JSON_COMPACT | JSON_SORT_KEYS);
    if (text) printf("training settings (ember train):\n  %s\n", text);
    free(text);
  }
  if (json_object_get(o, "parameters")) {
    print_leaves("parameters", json_object_get(o, "parameters"), json_object_get(o, "parameter_count"));
    print_leaves("states", json_object_get(o, "states"), json_object_get(o, "state_count"));
  } else if (!json_is_null(json_object_get(o, "graph_error"))) {
    printf("graph: cannot be built: %s\n", json_string_value(json_object_get(o, "graph_error")));
  } else {
    printf("graph: none (a checkpoint of host state only)\n");
  }
}

static int inspect(const char *file, int json) {
  em_checkpoint *c = NULL;
  char *graph_error = NULL;
  if (em_checkpoint_load(file, &c)) {
    graph_error = strdup(em_last_error());
    em_status first = em_checkpoint_info(file, &c);
    if (first) {
      free(graph_error);
      /* Refused before the graph: damaged, foreign, newer, unreadable. */
      if (json) {
        json_t *o = json_pack("{s:s, s:s, s:s}", "file", file, "error", em_last_error(), "status",
                              em_status_name(first));
        json_dumpf(o, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        putchar('\n');
        json_decref(o);
      }
      fprintf(stderr, "ember checkpoint: %s\n", em_last_error());
      return 1;
    }
    /* Whole, but its graph is not one this build can build (graph_error). */
  }
  json_t *o = describe(file, c, graph_error);
  if (json) {
    json_dumpf(o, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    putchar('\n');
  } else {
    print_text(o);
  }
  if (graph_error) fprintf(stderr, "ember checkpoint: the graph cannot be built: %s\n", graph_error);
  json_decref(o);
  em_checkpoint_free(c);
  int rc = graph_error ? 1 : 0;
  free(graph_error);
  return rc;
}

int ember_checkpoint_main(int argc, char **argv) {
  /* argv[0] is "checkpoint". */
  const char *sub = NULL, *file = NULL;
  int json = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout, 0);
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (argv[i][0] == '-' && argv[i][1]) {
      fprintf(stderr, "ember checkpoint: unknown option %s\n", argv[i]);
      return usage(stderr, EXIT_USAGE);
    } else if (!sub) sub = argv[i];
    else if (!file) file = argv[i];
    else return usage(stderr, EXIT_USAGE);
  }
  if (!sub || strcmp(sub, "inspect") || !file) return usage(stderr, EXIT_USAGE);
  return inspect(file, json);
}
