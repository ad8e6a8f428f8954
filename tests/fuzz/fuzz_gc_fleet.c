// fuzz-sources: tools/gpucheck/report.c tools/gpucheck/gpus.c tools/gpucheck/images_json.c arch_table/arch_table.c build/gen/arch_table_data.c -ljansson
/* libFuzzer target for `gpucheck fleet`'s report reader: jansson parsing and
 * the validation of a host report (schema, command, facts, sections), then
 * everything fleet derives from an accepted report: the host's verdict per
 * GPU, the table and the JSON facts. fleet.c is included so that its static
 * reader can be called on bytes; the GPU-code reader (images.c) is replaced
 * by stubs, since --binary is not what this target tests.
 *
 * Invariants: a rejected report says why; an accepted one yields only valid
 * UTF-8 text (the JSON output depends on it) and a verdict that exists. */
#include <stdint.h>
#include <stdlib.h>

#include "../../tools/gpucheck/fleet.c"

int gc_images_read(const char *path, gc_image_set *out, char *err, size_t err_cap) {
  memset(out, 0, sizeof *out);
  snprintf(err, err_cap, "%s: not read by this fuzz target", path);
  return -1;
}

void gc_images_free(gc_image_set *s) { (void)s; }

void gc_images_verdict(const gc_image_set *s, int cc, int driver, gc_run_verdict *out) {
  (void)s;
  memset(out, 0, sizeof *out);
  out->image = -1;
  out->run = (cc + driver) % 2 ? GC_RUN_NO_IMAGE : GC_RUN_NATIVE;
  snprintf(out->why, sizeof out->why, "stub");
}

const char *gc_run_name(gc_run r) { return r == GC_RUN_NATIVE ? "runs natively" : "no usable image"; }
/* A real key of sources.tsv for the verdicts that cite one (images.c does). */
const char *gc_run_sources(gc_run r) { return r == GC_RUN_NATIVE ? NULL : "BW-COMPAT"; }

static void must_be_utf8(const char *s) {
  json_t *j = json_string(s);
  if (!j) abort();
  json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *sink;
  if (!sink) sink = fopen("/dev/null", "w");
  fleet_host h;
  char err[1200] = "";
  if (fleet_parse("fuzz.json", (const char *)data, size, &h, err, sizeof err)) {
    if (!err[0]) abort(); /* a rejection must say why */
    host_free(&h);
    return 0;
  }
  gc_image_set set;
  memset(&set, 0, sizeof set);
  for (size_t k = 0; k < h.n_gpus; k++) {
    fleet_gpu *g = &h.gpus[k];
    if (size % 2) binary_verdict(&h, g, &set, "bin");
    else host_verdict(&h, g);
    utf8_clean(g->why), utf8_clean(g->fix);
    if (g->verdict < GC_INFO || g->verdict > GC_FAIL) abort();
    must_be_utf8(g->name), must_be_utf8(g->why), must_be_utf8(g->fix);
  }
  must_be_utf8(h.hostname), must_be_utf8(h.report), must_be_utf8(h.driver), must_be_utf8(h.driver_state);
  gc_report *rep = gc_report_new("fleet");
  json_t *hosts = json_array();
  add_host(rep, 0, &h, size % 2, hosts);
  json_decref(hosts);
  json_t *j = gc_report_json(rep);
  if (!j) abort();
  json_decref(j);
  gc_report_free(rep);
  if (sink) print_table(sink, &h, 1, size % 2, "summary");
  host_free(&h);
  return 0;
}
