/* gpucheck: shared declarations of its commands. */
#ifndef GPUCHECK_H
#define GPUCHECK_H

#include "report.h"

typedef struct gc_opts {
  int json;          /* --json */
  int color;         /* a terminal and no --no-color */
  const char *root;  /* --root DIR or $GPUCHECK_ROOT: read /sys, /proc, /etc, /dev and the
                        loader path under DIR instead of / (tests, offline diagnosis of a
                        copied system tree). NULL: the live system */
} gc_opts;

/* A command parses its own arguments (argv[0] is the command name) and fills
 * *out. It returns 0, or an exit code (GC_EXIT_USAGE, GC_EXIT_INPUT, ...) after
 * printing the problem to stderr, or GC_DONE when it already did all it had to
 * (printed its --help): gpucheck then exits 0 with no report. */
#define GC_DONE (-1)
typedef int (*gc_command_fn)(int argc, char **argv, const gc_opts *o, gc_report **out);

int gc_cmd_host(int argc, char **argv, const gc_opts *o, gc_report **out);    /* host.c */
int gc_cmd_inspect(int argc, char **argv, const gc_opts *o, gc_report **out); /* inspect.c */
int gc_cmd_whatif(int argc, char **argv, const gc_opts *o, gc_report **out);  /* whatif.c */
int gc_cmd_explain(int argc, char **argv, const gc_opts *o, gc_report **out); /* explain.c */
int gc_cmd_fleet(int argc, char **argv, const gc_opts *o, gc_report **out);   /* fleet.c */

/* A GPU named on the command line: "8.6", "sm_86", "86", or a model name
 * matched against arch_table's representative GPUs ("A100", "RTX 3090",
 * "H100", "Tesla K80", case-insensitive). Returns 0 and the CC (10*major+minor)
 * and a display name; -1 with a message in err when unknown or ambiguous. */
int gc_gpu_parse(const char *spec, int *cc, char *name, size_t name_cap, char *err, size_t err_cap);

/* "12.2" from 12020; "unknown" for 0. buf of 16 bytes. */
const char *gc_cuda_str(int v, char buf[16]);

#endif
