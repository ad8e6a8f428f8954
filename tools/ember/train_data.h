/* The data of `ember train` and `ember eval` (train_data.c): the IDX
 * splits of --data as data sets and minibatch sources, and the test report. */
#ifndef EMBER_TOOL_TRAIN_DATA_H
#define EMBER_TOOL_TRAIN_DATA_H

#include "ember.h"
#include "train_model.h"
#include "train_opts.h"

typedef struct cli_data {
  em_dataset *train, *validation, *test;          /* validation: the last --validation training images */
  em_minibatch_source *train_src, *validation_src, *test_src;
  double mean, std;            /* of the training images scaled to [0, 1] (eval: the checkpoint's) */
} cli_data;

/* The mean and standard deviation of a data set's "features" (u8, scaled
 * to [0, 1]); 0 and 1 when it has none. */
void cli_image_stats(const em_dataset *d, double *mean, double *std);
/* "test: N images, loss L, error E: accuracy A%", or its JSON line. */
void cli_print_test(FILE *out, int json, uint64_t samples, double loss, double error);

/* Opens what cmd needs (train: the training split, its validation part and
 * the test split; eval: the test split, standardised with o->norm_mean and
 * o->norm_std). Returns 0 or an exit code after
 * printing why (EXIT_NO_INPUT: missing files, EXIT_DATA: malformed ones). */
int cli_data_open(const train_opts *o, unsigned cmd, cli_data *d);
void cli_data_free(cli_data *d);

/* The test split through the trainer's evaluation executor: prints the
 * loss, error and accuracy (a JSON line with json), then where each
 * kernel's code came from. Returns 0 or an exit code. */
int cli_report_test(em_trainer *t, const cli_model *m, cli_data *d, int json, em_device dev);

#endif
