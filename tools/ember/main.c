/* ember: the command line of the Ember library.
 *
 *   ember devices [--json]   the driver, each device and its dispatch plan per
 *                            kernel module, with the reason for every choice
 *   ember images [--json] [--file LIB]
 *                            the kernel images embedded in this library, or
 *                            in LIB (read with libelf, not loaded)
 *   ember selftest [--json]  loads every module on every device along its
 *                            plan and checks each kernel against its CPU twin
 *   ember ops [--json]       the graph operations of this build, with their
 *                            arity, gradient and attributes
 *   ember checkpoint inspect FILE [--json]
 *                            a checkpoint's manifest, sections and parameters
 *                            (checkpoint_cmd.c; exit 1: the file was refused)
 *   ember train ...          trains a model of the zoo on a data set (train_cmd.c)
 *   ember eval ...           evaluates a checkpoint on a data set (eval_cmd.c)
 *   ember inspect MODEL.onnx [--json]
 *                            an ONNX model's inputs, outputs, opsets and ops, and
 *                            the ops Ember lacks (inspect_cmd.c; exit 1: some)
 *   ember run MODEL.onnx ... runs an ONNX model on .npy inputs, writes .npy
 *                            outputs (run_cmd.c)
 *   ember export CKPT -o MODEL.onnx  the model of an `ember train` checkpoint
 *                            as ONNX (export_cmd.c)
 *   ember COMMAND --help     what a command does and takes
 *
 * Exit codes (train_cmd.h): 0 fine; 1 a check failed, training diverged, or
 * EMBER_STRICT=1 refused a fallback; 64 usage error; 65 malformed data or
 * checkpoint; 66 data or checkpoint missing; 69 device not usable; 70
 * internal error; 73 checkpoint cannot be written. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_cmd.h"
#include "ember.h"
#include "onnx_cmd.h"
#include "train_cmd.h"

static const char *variant_str(char v) { return v == 'a' ? "a" : v == 'f' ? "f" : ""; }

static const char *kind_str(em_image_kind k) {
  switch (k) {
  case EM_IMAGE_CUBIN: return "cubin";
  case EM_IMAGE_PTX: return "ptx";
  case EM_IMAGE_SOURCE: return "source";
  default: return "header";
  }
}

static const char *driver_state_str(em_driver_state s) {
  static const char *const names[] = {"ok", "not-found", "stub", "init-failed", "no-device", "too-old"};
  return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "unknown";
}

static int fail(const char *what) {
  fprintf(stderr, "ember: %s: %s\n", what, em_last_error());
  return 1;
}

/* ------------------------------------------------------------- images --- */

static json_t *image_json(size_t i, const em_image_info *img) {
  char hash[17];
  snprintf(hash, sizeof hash, "%016llx", (unsigned long long)img->hash);
  return json_pack("{s:I, s:s, s:s, s:s, s:i, s:s, s:i, s:i, s:i, s:b, s:s, s:s, s:I, s:s, s:s, s:I}", "index",
                   (json_int_t)i, "module", img->module, "kind", kind_str(img->kind), "arch_name",
                   img->kind == EM_IMAGE_CUBIN ? "sm" : img->kind == EM_IMAGE_PTX ? "compute" : "", "arch", img->arch,
                   "variant", variant_str(img->variant), "ptx_isa", img->ptx_isa, "toolkit", img->toolkit,
                   "min_driver", img->min_driver, "legacy", (img->flags & EM_IMAGE_LEGACY) != 0, "producer",
                   img->producer, "kernels", img->kernels, "size", (json_int_t)img->size, "hash", hash, "storage",
                   img->storage == EM_IMAGE_ZSTD ? "zstd" : "stored", "stored_size", (json_int_t)img->stored_size);
}

/* The table of this library, or of another file (read without loading it). */
static em_image_table *file_table;

static em_status image_at(size_t i, em_image_info *img) {
  return file_table ? em_image_table_get(file_table, i, img) : em_image_get(i, img);
}

static int cmd_images(int json, const char *file) {
  size_t n;
  if (file) {
    if (em_image_table_open(file, &file_table)) return fail("reading the image table");
    n = em_image_table_count(file_table);
  } else if (em_image_count(&n)) {
    return fail("reading the image table");
  }
  json_t *arr = json_array();
  if (!json) printf("%-3s %-12s %-7s %-12s %-6s %-8s %-11s %-9s %-9s %s\n", "#", "module", "kind", "arch", "isa",
                    "toolkit", "min driver", "bytes", "stored", "producer");
  for (size_t i = 0; i < n; i++) {
    em_image_info img;
    if (image_at(i, &img)) return fail("reading the image table");
    char arch[32] = "-", isa[16] = "-", tk[16] = "-", md[16] = "-";
    if (img.kind == EM_IMAGE_CUBIN || img.kind == EM_IMAGE_PTX)
      snprintf(arch, sizeof arch, "%s_%d%s", img.kind == EM_IMAGE_CUBIN ? "sm" : "compute", img.arch, variant_str(img.variant));
    if (img.ptx_isa) snprintf(isa, sizeof isa, "%d.%d", img.ptx_isa / 10, img.ptx_isa % 10);
    if (img.toolkit) snprintf(tk, sizeof tk, "%d.%d", img.toolkit / 1000, (img.toolkit % 1000) / 10);
    if (img.min_driver) snprintf(md, sizeof md, "%d.%d", img.min_driver / 1000, (img.min_driver % 1000) / 10);
    if (json) {
      json_array_append_new(arr, image_json(i, &img));
    } else {
      printf("%-3zu %-12s %-7s %-12s %-6s %-8s %-11s %-9llu %-9llu %s%s\n", i, img.module, kind_str(img.kind), arch,
             isa, tk, md, (unsigned long long)img.size, (unsigned long long)img.stored_size, img.producer,
             (img.flags & EM_IMAGE_LEGACY) ? " (legacy)" : "");
    }
  }
  if (json) {
    json_t *root = json_pack("{s:s, s:i, s:o}", "schema", "ember.images/1", "count", (int)n, "images", arr);
    json_dumpf(root, stdout, JSON_INDENT(2));
    putchar('\n');
    json_decref(root);
  } else {
    json_decref(arr);
  }
  em_image_table_close(file_table);
  return 0;
}

/* ------------------------------------------------------------ devices --- */

static json_t *plan_json(const char *module, const em_plan *p) {
  json_t *cands = json_array();
  for (int i = 0; i < p->n_candidates; i++) {
    const em_plan_candidate *c = &p->candidates[i];
    json_t *o = json_pack("{s:s, s:i, s:b, s:s}", "path", em_path_name(c->path), "image", c->image_index, "viable",
                          c->viable, "reason", c->reason);
    if (c->path == EM_PATH_NVRTC) json_object_set_new(o, "nvrtc_version", json_integer(c->nvrtc_version));
    json_array_append_new(cands, o);
  }
  return json_pack("{s:s, s:s, s:i, s:i, s:b, s:s, s:o}", "module", module, "path", em_path_name(p->path), "step",
                   p->step, "chosen", p->chosen, "strict_error", p->strict_error, "reason", p->reason, "candidates",
                   cands);
}

/* Shared with `ember train --device auto` (train_cmd.h). */
int ember_print_device_plans(FILE *out, int d) {
  em_device_info info;
  size_t n_modules = 0;
  int refused = 0;
  if (em_device_get_info(em_cuda(d), &info) || em_module_count(&n_modules)) return -1;
  for (size_t m = 0; m < n_modules; m++) {
    const char *module;
    em_plan plan;
    if (em_module_name(m, &module) || em_dispatch_plan(em_cuda(d), module, &plan)) return -1;
    if (plan.strict_error) {
      refused++;
      fprintf(stderr, "ember: EMBER_STRICT=1 refuses the CPU fallback of module %s on cuda:%d (%s): %s\n", module, d,
              info.name, plan.reason);
    }
    fprintf(out, "  %-12s -> %-10s %s%s\n", module, em_path_name(plan.path), plan.reason,
            plan.strict_error ? "  [refused: EMBER_STRICT=1]" : "");
  }
  return refused;
}

static int cmd_devices(int json) {
  em_driver_info drv;
  int n = 0, strict_refusals = 0;
  size_t n_modules = 0;
  if (em_driver_get_info(&drv) || em_cuda_device_count(&n) || em_module_count(&n_modules)) return fail("starting the runtime");

  json_t *devices = json_array();
  if (!json) {
    printf("Ember %s\n", em_version());
    printf("driver: %s (%s)\n", driver_state_str(drv.state), drv.message);
    em_device_info cpu;
    em_device_get_info(em_cpu(), &cpu);
    printf("cpu: %d cores, %.1f GiB: every module runs here\n", cpu.sm_count, (double)cpu.total_memory / (1 << 30));
  }
  char blas[512];
  em_cpu_blas_info(blas, sizeof blas);
  if (!json) printf("cpu blas: %s\n", blas);
  char conv[600];
  em_cpu_conv_info(conv, sizeof conv);
  if (!json) printf("cpu convolution: %s\n", conv);
  json_t *libs = json_array();
  size_t n_libs = 0;
  em_cuda_library_count(&n_libs);
  for (size_t i = 0; i < n_libs; i++) {
    em_cuda_library L;
    if (em_cuda_library_get(i, &L)) continue;
    if (json)
      json_array_append_new(libs, json_pack("{s:s, s:b, s:s, s:s, s:s}", "name", L.name, "found", L.found, "path", L.path,
                                            "version", L.version, "note", L.note));
    else if (L.found)
      printf("%-8s %-8s %s%s%s\n", L.name, L.version, L.path, L.note[0] ? "  " : "", L.note);
    else
      printf("%-8s -        %s\n", L.name, L.note);
  }
  for (int d = 0; d < n; d++) {
    em_device_info info;
    if (em_device_get_info(em_cuda(d), &info)) return fail("reading a device");
    json_t *plans = json_array();
    if (!json)
      printf("\ncuda:%d %s  CC %d.%d  %d SMs  %.1f GiB  %s %s\n", d, info.name, info.cc_major, info.cc_minor,
             info.sm_count, (double)info.total_memory / (1 << 30), info.pci_bus_id, info.uuid);
    if (!json) {
      int refused = ember_print_device_plans(stdout, d);
      if (refused < 0) return fail("planning");
      strict_refusals += refused;
    }
    json_t *fast = json_array();
    static const char *const fast_libs[] = {"cublas", "cudnn"};
    for (size_t k = 0; k < sizeof fast_libs / sizeof fast_libs[0]; k++) {
      int used = 0;
      char why[256];
      if (em_device_library_use(em_cuda(d), fast_libs[k], &used, why, sizeof why)) return fail("asking about a library");
      if (json) json_array_append_new(fast, json_pack("{s:s, s:b, s:s}", "library", fast_libs[k], "used", used, "reason", why));
      else printf("  %-12s -> %-10s %s\n", fast_libs[k], used ? "fast mode" : "not used", why);
    }
    for (size_t m = 0; json && m < n_modules; m++) {
      const char *module;
      em_plan plan;
      if (em_module_name(m, &module) || em_dispatch_plan(em_cuda(d), module, &plan)) return fail("planning");
      if (plan.strict_error) {
        strict_refusals++;
        fprintf(stderr, "ember: EMBER_STRICT=1 refuses the CPU fallback of module %s on cuda:%d (%s): %s\n", module, d,
                info.name, plan.reason);
      }
      json_array_append_new(plans, plan_json(module, &plan));
    }
    if (json)
      json_array_append_new(devices, json_pack("{s:i, s:s, s:i, s:i, s:i, s:I, s:s, s:s, s:o, s:o}", "ordinal", d,
                                               "name", info.name, "cc_major", info.cc_major, "cc_minor", info.cc_minor,
                                               "sm_count", info.sm_count, "total_memory", (json_int_t)info.total_memory,
                                               "pci_bus_id", info.pci_bus_id, "uuid", info.uuid, "plans", plans,
                                               "fast_mode_libraries", fast));
    else json_decref(plans), json_decref(fast);
  }
  if (json) {
    json_t *root = json_pack("{s:s, s:s, s:{s:s, s:i, s:i, s:s, s:s}, s:s, s:s, s:o, s:o}", "schema", "ember.devices/1",
                             "version", em_version(), "driver", "state", driver_state_str(drv.state), "version",
                             drv.driver_version, "cuda_error", drv.cuda_error, "library", drv.library_path, "message",
                             drv.message, "cpu_blas", blas, "cpu_convolution", conv, "libraries", libs, "devices", devices);
    json_dumpf(root, stdout, JSON_INDENT(2));
    putchar('\n');
    json_decref(root);
  } else {
    json_decref(devices);
    json_decref(libs);
  }
  if (strict_refusals) {
    fprintf(stderr, "ember: EMBER_STRICT=1 refused %d CPU fallback%s\n", strict_refusals,
            strict_refusals == 1 ? "" : "s");
    return 1;
  }
  return 0;
}

int ember_selftest(int json); /* selftest.c */

/* `ember ops`: the operations of this build, for people writing graphs. */
static int cmd_ops(int json) {
  size_t n = em_op_info_count();
  json_t *arr = json ? json_array() : NULL;
  for (size_t i = 0; i < n; i++) {
    em_op_info o;
    if (em_op_info_get(i, &o) || o.internal) continue;
    if (json) {
      json_array_append_new(arr, json_pack("{s:s, s:s, s:i, s:i, s:i, s:b, s:b}", "name", o.name, "doc",
                                           o.doc ? o.doc : "", "min_inputs", o.min_inputs, "max_inputs", o.max_inputs,
                                           "outputs", o.n_outputs, "differentiable", o.differentiable, "gpu", o.gpu));
      continue;
    }
    char arity[32];
    if (o.min_inputs == o.max_inputs) snprintf(arity, sizeof arity, "%d", o.min_inputs);
    else snprintf(arity, sizeof arity, "%d-%d", o.min_inputs, o.max_inputs);
    printf("%-32s in %-5s out %d %s %s  %s\n", o.name, arity, o.n_outputs, o.differentiable ? "grad" : "    ",
           o.gpu ? "gpu" : "cpu", o.doc ? o.doc : "");
  }
  if (json) {
    json_t *root = json_pack("{s:s, s:o}", "schema", "ember.ops/1", "ops", arr);
    char *text = json_dumps(root, JSON_INDENT(2));
    puts(text ? text : "{}");
    free(text);
    json_decref(root);
  }
  return 0;
}

static const char usage_text[] =
    "usage: ember devices [--json] | ember images [--json] [--file LIB] | ember selftest [--json] | "
    "ember ops [--json] | ember checkpoint inspect FILE [--json] | ember train [OPTIONS] | ember eval [OPTIONS] | "
    "ember inspect MODEL.onnx [--json] | ember run MODEL.onnx [OPTIONS] | ember export CHECKPOINT -o MODEL.onnx | "
    "ember COMMAND --help\n";

static int usage(void) {
  fputs(usage_text, stderr);
  return EXIT_USAGE;
}

/* `ember --help`, `ember COMMAND --help` for the commands of this file. */
static int help(const char *cmd) {
  static const struct { const char *cmd, *text; } helps[] = {
      {"devices", "usage: ember devices [--json]\n\nThe CUDA driver, the CUDA libraries found, the CPU and its BLAS, and each GPU with "
                  "its dispatch plan:\nper kernel module the path chosen (cubin, ptx, ptx-legacy, nvrtc, cpu) and why.\n"},
      {"images", "usage: ember images [--json] [--file LIB]\n\nThe kernel images embedded in this library (or in LIB, "
                 "read without loading it):\nmodule, kind, architecture, PTX ISA, toolkit, lowest driver, size, producer.\n"},
      {"selftest", "usage: ember selftest [--json]\n\nLoads every kernel module on every device along its plan and "
                   "checks each kernel\nagainst its CPU twin. Exit status 1 when a check fails.\n"},
      {"ops", "usage: ember ops [--json]\n\nThe graph operations of this build: arity, outputs, gradient, GPU kernel, "
              "attributes.\n"},
  };
  for (size_t i = 0; cmd && i < sizeof helps / sizeof helps[0]; i++)
    if (!strcmp(cmd, helps[i].cmd)) {
      fputs(helps[i].text, stdout);
      return 0;
    }
  if (cmd) return usage();
  fputs(usage_text, stdout);
  fputs("\nCommands:\n"
        "  devices    the driver, the GPUs and their dispatch plans\n"
        "  images     the kernel images embedded in the library\n"
        "  selftest   every kernel on every device against its CPU twin\n"
        "  ops        the graph operations\n"
        "  checkpoint inspect FILE: a checkpoint's manifest, sections and parameters\n"
        "  train      train a model (mlp, lenet, resnet20) on a data set\n"
        "  eval       evaluate a checkpoint on a data set\n"
        "  inspect    an ONNX model's inputs, outputs, opsets, ops, and the ops Ember lacks\n"
        "  run        run an ONNX model on .npy inputs, write its outputs as .npy\n"
        "  export     write the model of an `ember train` checkpoint as an ONNX file\n"
        "\nExit codes: 0 fine; 1 a check failed or training diverged; 64 usage error; 65 malformed data or\n"
        "checkpoint; 66 data or checkpoint missing; 69 device not usable; 70 internal error; 73 checkpoint\n"
        "cannot be written.\n",
        stdout);
  return 0;
}

static int is_help(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

int main(int argc, char **argv) {
  if (argc < 2) return usage();
  if ((is_help(argv[1]) || !strcmp(argv[1], "help")) && argc > 2 && !strcmp(argv[2], "export"))
    return ember_export(2, (char *[]){"export", "--help", NULL});
  if (is_help(argv[1]) || !strcmp(argv[1], "help")) return help(argc > 2 ? argv[2] : NULL);
  if (!strcmp(argv[1], "checkpoint")) {
    int rc = ember_checkpoint_main(argc - 1, argv + 1);
    em_shutdown();
    return rc;
  }
  if (!strcmp(argv[1], "inspect") || !strcmp(argv[1], "run") || !strcmp(argv[1], "export")) {
    int rc = !strcmp(argv[1], "inspect") ? ember_inspect(argc - 1, argv + 1)
             : !strcmp(argv[1], "run")   ? ember_run(argc - 1, argv + 1)
                                         : ember_export(argc - 1, argv + 1);
    em_shutdown();
    return rc;
  }
  if (!strcmp(argv[1], "train") || !strcmp(argv[1], "eval")) {
    int rc = !strcmp(argv[1], "train") ? ember_train(argc - 1, argv + 1) : ember_eval(argc - 1, argv + 1);
    em_shutdown();
    return rc;
  }
  for (int i = 2; i < argc; i++)
    if (is_help(argv[i])) return help(argv[1]);
  int json = 0;
  const char *file = NULL;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (!strcmp(argv[i], "--file") && i + 1 < argc && !strcmp(argv[1], "images")) file = argv[++i];
    else return usage();
  }
  int rc;
  if (!strcmp(argv[1], "devices")) rc = cmd_devices(json);
  else if (!strcmp(argv[1], "images")) rc = cmd_images(json, file);
  else if (!strcmp(argv[1], "selftest")) rc = ember_selftest(json);
  else if (!strcmp(argv[1], "ops")) rc = cmd_ops(json);
  else return usage();
  em_shutdown();
  return rc;
}
