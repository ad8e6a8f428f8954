/* Schedules inside the training layer (training/schedule.c), for the
 * learners (training/learner.c). */
#ifndef EMBER_TRAINING_SCHEDULE_INTERNAL_H
#define EMBER_TRAINING_SCHEDULE_INTERNAL_H

#include "ember/learner.h"

/* EM_ERR_INVALID_ARGUMENT naming `what` and the field when s is malformed. */
em_status em_schedule_check(const em_schedule *s, const char *what);
/* The piecewise value with warmup and cosine, before unit conversion. */
double em_schedule_eval(const em_schedule *s, uint64_t seen, uint64_t mb);
/* A rate: PER_SAMPLE times mb. */
double em_schedule_rate(const em_schedule *s, uint64_t seen, uint64_t mb);
/* A momentum: PER_SAMPLE v^mb, TIME_CONSTANT exp(-mb / v). */
double em_schedule_momentum(const em_schedule *s, uint64_t seen, uint64_t mb);

#endif
