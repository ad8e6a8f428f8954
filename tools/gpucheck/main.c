/* gpucheck: explains why a GPU program will or will not run — on this host,
 * in this container, for a binary, for a fleet, or offline.
 *
 *   gpucheck [host]            this machine and this process environment
 *   gpucheck inspect FILE...   the GPU code inside binaries, and who can run it
 *   gpucheck whatif ...        offline: would this combination run?
 *   gpucheck explain CODE|NAME what a CUDA error means and what to check
 *   gpucheck fleet REPORT...   many hosts' JSON reports as one table
 *
 * Common options: --json, --no-color, --root DIR. Exit codes: 0 all ok, 1 something
 * will fail, 2 warnings only, 64 usage, 65 bad input, 70 internal error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpucheck.h"

static const struct {
  const char *name;
  gc_command_fn fn;
  const char *help;
} commands[] = {
  {"host", gc_cmd_host, "this machine and this process environment (the default)"},
  {"inspect", gc_cmd_inspect, "FILE... [--gpu NAME|CC]... [--driver VER]: the GPU code inside files"},
  {"whatif", gc_cmd_whatif, "[--gpu ..] [--driver ..] [--cuda-runtime ..] [--image-require ..] [--torch ..] [--binary ..]"},
  {"explain", gc_cmd_explain, "CODE|NAME: a CUDA driver or runtime error"},
  {"fleet", gc_cmd_fleet, "REPORT.json... [--binary FILE]: hosts x GPUs x verdicts"},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
  fprintf(f, "usage: gpucheck [COMMAND] [--json] [--no-color] [--root DIR] ...\n\ncommands:\n");
  for (size_t i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].help);
  fprintf(f, "\nexit: 0 all ok, 1 something will fail, 2 warnings only, 64 usage, 65 bad input, 70 internal\n"
             "docs: docs/gpucheck.md\n");
}

/* Takes the common options out of argv (in place); returns the new argc or -1. */
static int common_options(int argc, char **argv, gc_opts *o) {
  int out = 0, no_color = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) o->json = 1;
    else if (!strcmp(argv[i], "--no-color")) no_color = 1;
    else if (!strcmp(argv[i], "--root")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "gpucheck: --root needs a directory\n");
        return -1;
      }
      o->root = argv[++i];
    } else argv[out++] = argv[i];
  }
  const char *term = getenv("TERM");
  o->color = !no_color && !o->json && isatty(STDOUT_FILENO) && !getenv("NO_COLOR") && term && strcmp(term, "dumb");
  if (!o->root) {
    const char *r = getenv("GPUCHECK_ROOT");
    if (r && *r) o->root = r;
  }
  return out;
}

int main(int argc, char **argv) {
  gc_opts o = {0};
  argc = common_options(argc - 1, argv + 1, &o);
  argv = argv + 1;
  if (argc < 0) return GC_EXIT_USAGE;
  if (argc > 0 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h") || !strcmp(argv[0], "help"))) {
    usage(stdout);
    return 0;
  }
  const char *name = argc > 0 && argv[0][0] != '-' ? argv[0] : "host";
  size_t c = 0;
  while (c < N_COMMANDS && strcmp(commands[c].name, name)) c++;
  if (c == N_COMMANDS) {
    fprintf(stderr, "gpucheck: unknown command '%s'\n", name);
    usage(stderr);
    return GC_EXIT_USAGE;
  }
  char *host_argv[] = {"host", NULL};
  if (argc == 0 || argv[0][0] == '-') { /* bare `gpucheck [options]` */
    if (argc > 0) {
      fprintf(stderr, "gpucheck: unknown option '%s'\n", argv[0]);
      return GC_EXIT_USAGE;
    }
    argc = 1;
    argv = host_argv;
  }
  gc_report *r = NULL;
  int rc = commands[c].fn(argc, argv, &o, &r);
  if (rc == GC_DONE) {
    gc_report_free(r);
    return 0;
  }
  if (rc) {
    gc_report_free(r);
    return rc;
  }
  if (!r) return GC_EXIT_INTERNAL;
  if (o.json) {
    json_t *j = gc_report_json(r);
    json_dumpf(j, stdout, JSON_INDENT(2) | JSON_ENSURE_ASCII);
    putchar('\n');
    json_decref(j);
  } else {
    gc_report_print(r, stdout, o.color);
  }
  rc = gc_report_exit_code(r);
  gc_report_free(r);
  return rc;
}
