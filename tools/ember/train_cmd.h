/* `ember train` and `ember eval` (train_cmd.c, eval_cmd.c), called from
 * main.c, and what the two share: exit codes, device choice, the data set
 * and the model. */
#ifndef EMBER_TOOL_TRAIN_CMD_H
#define EMBER_TOOL_TRAIN_CMD_H

#include "ember.h"

/* Exit codes of the ember tool (sysexits.h's numbers where one fits). */
#define EXIT_CHECK_FAILED 1 /* a check failed; training diverged; EMBER_STRICT=1 refused a fallback */
#define EXIT_USAGE 64       /* bad command line */
#define EXIT_DATA 65        /* the data set or the checkpoint is malformed */
#define EXIT_NO_INPUT 66    /* the data set or the checkpoint is missing or unreadable */
#define EXIT_SOFTWARE 70    /* an internal error (a bug in Ember) */
#define EXIT_DEVICE 69      /* the device asked for is not usable */
#define EXIT_CANT_CREATE 73 /* the checkpoint cannot be written */

int ember_train(int argc, char **argv); /* argv[0] = "train" */
int ember_eval(int argc, char **argv);  /* argv[0] = "eval" */

/* main.c: the dispatch plan of every kernel module on a CUDA device, one
 * line each, as `ember devices` prints it. Returns the number of modules
 * EMBER_STRICT=1 refused, or -1 on an error (message in em_last_error). */
int ember_print_device_plans(FILE *out, int ordinal);

/* train_device.c. --device: "auto" (the best GPU, else the CPU), "cpu" or
 * "cuda:N"; writes the device chosen, and a GPU's dispatch plan, to info.
 * Returns 0, or EXIT_USAGE / EXIT_DEVICE after printing why to stderr. */
int ember_parse_device(const char *cmd, const char *text, FILE *info, em_device *out);
/* Where each loaded kernel module's code came from on dev (cubin, PTX JIT,
 * NVRTC, CPU). */
void ember_print_kernel_sources(FILE *out, em_device dev);
/* The exit code for a failed library call (EXIT_DEVICE for driver and
 * device errors, EXIT_DATA for malformed input, ...). */
int ember_exit_code(em_status s);

#endif
