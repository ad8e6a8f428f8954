/* The folder of cases and the run of tests/support/onnx_check.py (ort_check.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "ort_check.h"

int ts_ort_init(ts_ort_cases *c, const char *prefix) {
  snprintf(c->root, sizeof c->root, "/tmp/%s_XXXXXX", prefix);
  c->n = 0;
  return mkdtemp(c->root) ? 0 : -1;
}

static int onnx_code(em_dtype t) {
  static const int codes[] = {[EM_F32] = 1, [EM_F64] = 11, [EM_F16] = 10, [EM_BF16] = 16,
                              [EM_I32] = 6,  [EM_I64] = 7,  [EM_U8] = 2,   [EM_BOOL] = 9};
  return codes[t];
}

static void write_tensor(FILE *meta, const char *dir, const char *kind, const char *name, int k, const em_tensor *t) {
  char p[1200];
  size_t bytes = (size_t)em_tensor_numel(t) * em_dtype_size(em_tensor_dtype(t));
  void *buf = malloc(bytes + 1);
  assert_non_null(buf);
  if (em_tensor_to_host(t, buf, bytes)) fail_msg("ts_ort_keep: %s", em_last_error());
  snprintf(p, sizeof p, "%s/%s_%d.bin", dir, kind, k);
  FILE *f = fopen(p, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(buf, 1, bytes, f), bytes);
  fclose(f);
  free(buf);
  fprintf(meta, "%s %s %d %d", kind, name, onnx_code(em_tensor_dtype(t)), em_tensor_ndim(t));
  for (int i = 0; i < em_tensor_ndim(t); i++) fprintf(meta, " %lld", (long long)em_tensor_shape(t)[i]);
  fputc('\n', meta);
}

void ts_ort_new_case(ts_ort_cases *c, const char *label, char *dir, size_t cap) {
  snprintf(dir, cap, "%s/%03d_%s", c->root, c->n++, label);
  if (mkdir(dir, 0700)) fail_msg("ts_ort_new_case: cannot make %s", dir);
}

void ts_ort_write_case(const char *dir, const char *origin, double scaled, const void *model, size_t size,
                       const em_named_tensor *in, int n_in, em_tensor *const *want, int n_want) {
  char p[1200];
  if (model) {
    snprintf(p, sizeof p, "%s/model.onnx", dir);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(model, 1, size, f), size);
    fclose(f);
  }
  snprintf(p, sizeof p, "%s/meta.txt", dir);
  FILE *meta = fopen(p, "w");
  assert_non_null(meta);
  for (int i = 0; i < n_in; i++) write_tensor(meta, dir, "in", in[i].name, i, in[i].value);
  for (int i = 0; i < n_want; i++) write_tensor(meta, dir, "out", "-", i, want[i]);
  if (origin) fprintf(meta, "origin %s\n", origin);
  if (scaled > 0) fprintf(meta, "tolerance scaled %.17g\n", scaled);
  fclose(meta);
}

void ts_ort_keep(ts_ort_cases *c, const char *label, const char *origin, double scaled, const void *model, size_t size,
                 const em_named_tensor *in, int n_in, em_tensor *const *want, int n_want) {
  char dir[1100];
  ts_ort_new_case(c, label, dir, sizeof dir);
  ts_ort_write_case(dir, origin, scaled, model, size, in, n_in, want, n_want);
}

void ts_ort_check(const ts_ort_cases *c) {
  char dir[1024], cmd[4096];
  const char *env = getenv("EMBER_ONNXPY"), *src = getenv("EMBER_SRC_DIR");
  if (!src || !*src) src = ".";
  if (env && *env) snprintf(dir, sizeof dir, "%s", env);
  else snprintf(dir, sizeof dir, "%s/.tools/onnxpy", src);
  snprintf(cmd, sizeof cmd, "PYTHONPATH='%s' python3 -c 'import onnx, onnxruntime, numpy' >/dev/null 2>&1", dir);
  if (system(cmd) != 0) {
    print_message("SKIPPED: the onnx.checker / onnxruntime check of the %d exported models: python3 with onnx and "
                  "onnxruntime not found (PYTHONPATH %s; pip install --target %s onnx onnxruntime)\n",
                  c->n, dir, dir);
    skip();
  }
  snprintf(cmd, sizeof cmd, "PYTHONPATH='%s' OMP_NUM_THREADS=1 python3 '%s/tests/support/onnx_check.py' '%s'", dir, src,
           c->root);
  if (system(cmd) != 0) fail_msg("onnx.checker or onnxruntime disagreed (see above)");
}

void ts_ort_remove(const ts_ort_cases *c) {
  char cmd[256];
  if (getenv("EMBER_KEEP_EXPORTS") || !c->root[0]) return;
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", c->root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", c->root);
}
