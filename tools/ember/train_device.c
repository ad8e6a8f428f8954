/* What `ember train` and `ember eval` share about devices and failures:
 * --device's parsing (auto prints the chosen device's dispatch plan, with
 * the printer `ember devices` uses), the exit code of a failed library
 * call, and the report of where each kernel's code came from. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_cmd.h"

int ember_exit_code(em_status s) {
  switch (s) {
  case EM_OK: return 0;
  case EM_ERR_INVALID_ARGUMENT: return EXIT_USAGE;
  case EM_ERR_NO_DRIVER:
  case EM_ERR_STUB_DRIVER:
  case EM_ERR_INSUFFICIENT_DRIVER:
  case EM_ERR_NO_DEVICE:
  case EM_ERR_CUDA:
  case EM_ERR_NVRTC:
  case EM_ERR_NO_KERNEL_IMAGE:
  case EM_ERR_STRICT:
  case EM_ERR_OUT_OF_MEMORY: return EXIT_DEVICE;
  case EM_ERR_IO:
  case EM_ERR_NOT_FOUND: return EXIT_NO_INPUT;
  case EM_ERR_CORRUPT: return EXIT_DATA;
  case EM_ERR_NOT_FINITE: return EXIT_CHECK_FAILED;
  default: return EXIT_SOFTWARE;
  }
}

int ember_parse_device(const char *cmd, const char *text, FILE *info, em_device *out) {
  if (!strcmp(text, "cpu")) {
    *out = em_cpu();
  } else if (!strcmp(text, "auto")) {
    *out = em_device_best();
  } else if (!strncmp(text, "cuda:", 5)) {
    char *end;
    errno = 0;
    long n = strtol(text + 5, &end, 10);
    if (errno || end == text + 5 || *end || n < 0 || n > 1024) {
      fprintf(stderr, "ember %s: --device %s: expected auto, cpu or cuda:N (N = 0, 1, ...)\n", cmd, text);
      return EXIT_USAGE;
    }
    *out = em_cuda((int)n);
  } else {
    fprintf(stderr, "ember %s: --device %s: expected auto, cpu or cuda:N (N = 0, 1, ...)\n", cmd, text);
    return EXIT_USAGE;
  }
  em_status s = em_device_check(*out);
  if (s) {
    fprintf(stderr, "ember %s: --device %s: %s\n", cmd, text, em_last_error());
    return EXIT_DEVICE;
  }
  em_device_info di;
  if (em_device_get_info(*out, &di)) {
    fprintf(stderr, "ember %s: --device %s: %s\n", cmd, text, em_last_error());
    return EXIT_DEVICE;
  }
  if (out->kind == EM_DEVICE_CPU) {
    em_driver_info drv;
    em_driver_get_info(&drv);
    fprintf(info, "device: cpu, %d cores%s%s%s\n", di.sm_count, !strcmp(text, "auto") ? " (no usable GPU: " : "",
            !strcmp(text, "auto") ? drv.message : "", !strcmp(text, "auto") ? ")" : "");
    return 0;
  }
  fprintf(info, "device: cuda:%d %s, CC %d.%d, %d SMs, %.1f GiB; dispatch plan:\n", out->ordinal, di.name, di.cc_major,
          di.cc_minor, di.sm_count, (double)di.total_memory / (1 << 30));
  int refused = ember_print_device_plans(info, out->ordinal);
  if (refused < 0) {
    fprintf(stderr, "ember %s: planning on cuda:%d: %s\n", cmd, out->ordinal, em_last_error());
    return EXIT_DEVICE;
  }
  if (refused) {
    fprintf(stderr, "ember %s: EMBER_STRICT=1 refused %d CPU fallback%s on cuda:%d\n", cmd, refused,
            refused == 1 ? "" : "s", out->ordinal);
    return EXIT_DEVICE;
  }
  return 0;
}

void ember_print_kernel_sources(FILE *out, em_device dev) {
  if (dev.kind == EM_DEVICE_CPU) {
    fprintf(out, "kernel code: the CPU (Ember's C kernels and OpenBLAS); no GPU module was loaded\n");
    return;
  }
  size_t n = 0;
  em_module_count(&n);
  fprintf(out, "kernel code on cuda:%d, per module loaded:\n", dev.ordinal);
  int shown = 0;
  for (size_t m = 0; m < n; m++) {
    const char *module;
    em_load_record rec;
    if (em_module_name(m, &module) || em_dispatch_load_record(dev, module, &rec) || !rec.loaded) continue;
    const char *how = rec.path == EM_PATH_CUBIN        ? "prebuilt cubin"
                      : rec.path == EM_PATH_PTX        ? "PTX, JIT-compiled by the driver"
                      : rec.path == EM_PATH_PTX_LEGACY ? "legacy PTX (clang), JIT-compiled by the driver"
                      : rec.path == EM_PATH_NVRTC      ? "kernel source compiled by NVRTC"
                      : rec.path == EM_PATH_CPU        ? "the CPU (no GPU code runs here)"
                                                       : em_path_name(rec.path);
    fprintf(out, "  %-12s %s%s (%.1f ms)\n", module, how, rec.from_cache ? ", from the JIT cache" : "", rec.load_ms);
    shown++;
  }
  if (!shown) fprintf(out, "  (no module was loaded)\n");
}
