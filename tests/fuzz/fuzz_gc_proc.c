// fuzz-sources: tools/gpucheck/probe_parse.c
/* libFuzzer target for gpucheck's parsers of system text (tools/gpucheck/
 * probe_parse.c): /proc/driver/nvidia/version, /sys/module/nvidia/version,
 * /proc/driver/nvidia/gpus/<bdf>/information, /proc/<pid>/cgroup,
 * ld.so.conf, versions in file names, CUDA_VISIBLE_DEVICES and
 * NVIDIA_VISIBLE_DEVICES. Every parser gets the same bytes; libFuzzer's
 * buffer is exactly `size` bytes with no NUL after it, so a read past the
 * end is caught. The string-taking ones get a NUL-terminated copy. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/gpucheck/probe.h"

/* A parser's output string must end inside its array. */
#define TERMINATED(a) (memchr((a), '\0', sizeof(a)) != NULL)

static void check_version(const gc_version *v) {
  if (!TERMINATED(v->text)) abort();
}

static void on_conf(void *ctx, int include, const char *value) {
  (void)include;
  size_t *count = ctx;
  if (!value || !value[0] || strlen(value) >= 256) abort();
  (*count)++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *buf = (const char *)data;
  gc_kmod k;
  if (gc_probe_parse_proc_version(buf, size, &k) == 0 && (!k.found || k.v.minor < 0)) abort();
  check_version(&k.v);
  if (!TERMINATED(k.note) || !TERMINATED(k.arch)) abort();
  if (gc_probe_parse_sys_version(buf, size, &k) == 0 && !k.found) abort();
  check_version(&k.v);

  gc_proc_gpu g;
  memset(&g, 0, sizeof g);
  int rc = gc_probe_parse_gpu_information(buf, size, &g);
  if (!TERMINATED(g.model) || !TERMINATED(g.uuid) || !TERMINATED(g.bus) || !TERMINATED(g.bdf)) abort();
  if (rc == 0 && !g.model[0] && !g.uuid[0]) abort();

  const char *rt = gc_probe_parse_cgroup(buf, size);
  if (rt && !strlen(rt)) abort();

  size_t dirs = 0;
  gc_probe_parse_ld_conf(buf, size, on_conf, &dirs);

  gc_version v;
  if (gc_probe_parse_version(buf, size, &v) == 0 && v.major < 0) abort();
  check_version(&v);

  char *s = malloc(size + 1);
  if (!s) return 0;
  memcpy(s, data, size);
  s[size] = '\0';
  char ver[32];
  gc_probe_soname_version(s, "libcuda", ver, sizeof ver);
  if (!TERMINATED(ver)) abort();
  const char *uuids[3] = {"GPU-5a677481-8e9b-a8b5-c2cf-dce9f6031d2a", "GPU-7f8c99a6-b3c0-cdda-e7f4-010e1b28354f", NULL};
  gc_cvd c;
  gc_probe_cvd(s, 2, uuids, &c);
  if (c.visible > c.n_items || c.n_valid > c.n_items || !TERMINATED(c.invalid) || !TERMINATED(c.why)) abort();
  if (c.truncated_at >= 0 && c.truncated_at != c.n_valid) abort();
  gc_probe_cvd(s, -1, NULL, &c);
  gc_probe_nvd(s);
  free(s);
  return 0;
}
