/* JSON and names of images and verdicts, shared by inspect, whatif and fleet
 * (their facts use the same shapes: tools/gpucheck/SCHEMA.md). */
#include <stdio.h>
#include <string.h>

#include "gpucheck.h"
#include "images.h"

const char *gc_image_kind_name(gc_image_kind k) {
  switch (k) {
  case GC_IMG_CUBIN: return "cubin";
  case GC_IMG_PTX: return "ptx";
  case GC_IMG_LTOIR: return "ltoir";
  default: return "other";
  }
}

const char *gc_run_key(gc_run r) {
  switch (r) {
  case GC_RUN_NATIVE: return "native";
  case GC_RUN_PTX_JIT: return "ptx-jit";
  case GC_RUN_PTX_TOO_NEW: return "ptx-too-new";
  case GC_RUN_NO_IMAGE: return "no-image";
  case GC_RUN_CUBIN_TOO_NEW: return "cubin-too-new";
  }
  return "unknown";
}

static const char *comp_name(int c) { return c == 1 ? "lz4" : c == 2 || c == GC_COMP_EMBER_ZSTD ? "zstd" : ""; }
static const char *vstr(char v) { return v == 'a' ? "a" : v == 'f' ? "f" : ""; }

json_t *gc_image_json(const gc_image *m) {
  char b[16];
  json_t *o = json_pack("{s:s, s:i, s:s, s:s, s:I, s:I, s:I, s:I}", "kind", gc_image_kind_name(m->kind), "arch", m->arch,
                        "variant", vstr(m->variant), "compressed", comp_name(m->compression), "size",
                        (json_int_t)m->size, "uncompressed", (json_int_t)m->uncompressed, "container",
                        (json_int_t)m->container, "offset", (json_int_t)m->offset);
  if (m->kind == GC_IMG_PTX && m->ptx_isa > 0) {
    snprintf(b, sizeof b, "%d.%d", m->ptx_isa / 10, m->ptx_isa % 10);
    json_object_set_new(o, "ptx_isa", json_string(b));
  }
  if (m->toolkit > 0) json_object_set_new(o, "toolkit", json_string(gc_cuda_str(m->toolkit, b)));
  if (m->abi_version > 0) json_object_set_new(o, "abi_version", json_integer(m->abi_version));
  if (m->kernels[0] || m->n_kernels > 0) {
    /* A list cut at the buffer's end may end in a partial name: keep whole names only. */
    json_t *k = json_array();
    char copy[sizeof m->kernels];
    memcpy(copy, m->kernels, sizeof copy);
    int cut = strlen(copy) + 1 >= sizeof copy;
    char *names[sizeof copy / 2];
    size_t listed = 0;
    for (char *save = NULL, *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) names[listed++] = p;
    if (cut && listed > 0) listed--;
    for (size_t i = 0; i < listed; i++) json_array_append_new(k, json_string(names[i]));
    json_object_set_new(o, "kernels", k);
    json_object_set_new(o, "n_kernels", json_integer(m->n_kernels));
  }
  return o;
}

