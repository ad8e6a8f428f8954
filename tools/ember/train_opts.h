/* The options of `ember train` and `ember eval` (train_opts.c). */
#ifndef EMBER_TOOL_TRAIN_OPTS_H
#define EMBER_TOOL_TRAIN_OPTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CMD_TRAIN 1u
#define CMD_EVAL 2u

typedef struct train_opts {
  const char *model, *data, *device, *mode, *precision, *checkpoint, *learner, *schedule;
  int64_t epochs, batch, seed, threads, train_samples, test_samples, validation, patience, report_every;
  int64_t random_crop;             /* training images: pad by this much, then a random crop back (0: off) */
  int64_t channels[2], hidden[2];   /* the model's widths (0: the zoo's defaults) */
  int64_t input_dim, max_steps, classes; /* lstm: values per step, the longest sequence, label classes */
  double dropout;
  double norm_mean, norm_std;      /* eval: the training images' statistics, from the checkpoint */
  double lr, momentum, weight_decay, l2, warmup, min_delta; /* lr, momentum, weight_decay NaN: the learner's default */
  int resume, json, help, batch_norm, random_flip;
  uint64_t given;                  /* the options the command line gave (bit i: the table's entry i) */
} train_opts;

void train_opts_defaults(train_opts *o);
/* argv[0] is the command's name. Returns 0 (o->help set when --help was
 * given), or 1 after printing what is wrong and the usage line to stderr. */
int train_opts_parse(unsigned cmd, int argc, char **argv, train_opts *o);
void train_opts_help(unsigned cmd, FILE *out);

/* Whether the command line gave option `name` ("--batch"). */
int train_opts_given(const train_opts *o, const char *name);
/* For --resume, the options names[] (NULL-terminated) of a run: each one
 * the command line gave must equal the checkpoint's (saved). Returns NULL,
 * or a message naming the first option that differs and both values. */
const char *train_opts_conflict(const train_opts *cmdline, const train_opts *saved, const char *const *names,
                                char *buf, size_t cap);
/* Settings read from elsewhere (a checkpoint) checked as the command line's
 * are (choices, ranges; a field at its default passes): NULL, or a message
 * naming the option and the value. */
const char *train_opts_invalid(const train_opts *o, const char *const *names, char *buf, size_t cap);

#endif
