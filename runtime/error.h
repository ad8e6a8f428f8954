/* Internal error and logging helpers shared by every layer of the library. */
#ifndef EMBER_RUNTIME_ERROR_H
#define EMBER_RUNTIME_ERROR_H

#include <stdarg.h>
#include "ember/status.h"

/* Records a printf-style message as this thread's last error and returns s,
 * so a failure path reads: return em_fail(EM_ERR_IO, "cannot open %s: %s", ...). */
em_status em_fail(em_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepends context to the current message: "loading module x: <old message>". */
em_status em_fail_context(em_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Log channels, selected with EMBER_LOG=dispatch,cache,... (or "all"). */
enum {
  EM_LOG_DISPATCH = 1u << 0,
  EM_LOG_CACHE = 1u << 1,
  EM_LOG_MEMORY = 1u << 2,
  EM_LOG_DRIVER = 1u << 3
};

int em_log_enabled(unsigned channel);
/* Writes "ember[channel]: message\n" to stderr when the channel is enabled. */
void em_log(unsigned channel, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
