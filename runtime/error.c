/* Thread-local error messages and the EMBER_LOG channels. */
#include "error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#define EM_ERROR_CAP 2048

static _Thread_local char tl_error[EM_ERROR_CAP];

static const char *const status_names[] = {
  [EM_OK] = "EM_OK",
  [EM_ERR_INVALID_ARGUMENT] = "EM_ERR_INVALID_ARGUMENT",
  [EM_ERR_OUT_OF_MEMORY] = "EM_ERR_OUT_OF_MEMORY",
  [EM_ERR_NO_DRIVER] = "EM_ERR_NO_DRIVER",
  [EM_ERR_STUB_DRIVER] = "EM_ERR_STUB_DRIVER",
  [EM_ERR_INSUFFICIENT_DRIVER] = "EM_ERR_INSUFFICIENT_DRIVER",
  [EM_ERR_NO_DEVICE] = "EM_ERR_NO_DEVICE",
  [EM_ERR_CUDA] = "EM_ERR_CUDA",
  [EM_ERR_NVRTC] = "EM_ERR_NVRTC",
  [EM_ERR_NO_KERNEL_IMAGE] = "EM_ERR_NO_KERNEL_IMAGE",
  [EM_ERR_STRICT] = "EM_ERR_STRICT",
  [EM_ERR_NOT_FOUND] = "EM_ERR_NOT_FOUND",
  [EM_ERR_IO] = "EM_ERR_IO",
  [EM_ERR_CORRUPT] = "EM_ERR_CORRUPT",
  [EM_ERR_UNSUPPORTED] = "EM_ERR_UNSUPPORTED",
  [EM_ERR_USE_CPU] = "EM_ERR_USE_CPU",
  [EM_ERR_INTERNAL] = "EM_ERR_INTERNAL",
  [EM_ERR_NOT_FINITE] = "EM_ERR_NOT_FINITE",
};

__attribute__((visibility("default"))) const char *em_status_name(em_status s) {
  if ((unsigned)s < sizeof status_names / sizeof status_names[0] && status_names[s])
    return status_names[s];
  return "EM_ERR_UNKNOWN_STATUS";
}

__attribute__((visibility("default"))) const char *em_last_error(void) { return tl_error; }

__attribute__((visibility("default"))) void em_clear_error(void) { tl_error[0] = '\0'; }

em_status em_fail(em_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tl_error, sizeof tl_error, fmt, ap);
  va_end(ap);
  return s;
}

em_status em_fail_context(em_status s, const char *fmt, ...) {
  char prefix[512], old[EM_ERROR_CAP];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, tl_error, sizeof old);
  /* Truncation of a long chain of context is fine: the front says the most. */
  size_t n = strlen(prefix);
  memcpy(tl_error, prefix, n);
  if (n + 2 < sizeof tl_error) {
    tl_error[n++] = ':';
    tl_error[n++] = ' ';
  }
  size_t rest = strnlen(old, sizeof old);
  if (rest > sizeof tl_error - 1 - n) rest = sizeof tl_error - 1 - n;
  memcpy(tl_error + n, old, rest);
  tl_error[n + rest] = '\0';
  return s;
}

/* EMBER_LOG is read once per process: logging must be cheap on hot paths. */
static unsigned log_mask;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static void log_init(void) {
  const char *v = getenv("EMBER_LOG");
  if (!v) return;
  static const struct { const char *name; unsigned bit; } channels[] = {
    {"dispatch", EM_LOG_DISPATCH}, {"cache", EM_LOG_CACHE},
    {"memory", EM_LOG_MEMORY}, {"driver", EM_LOG_DRIVER},
  };
  char buf[256];
  snprintf(buf, sizeof buf, "%s", v);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (!strcmp(tok, "all") || !strcmp(tok, "1")) log_mask = ~0u;
    for (size_t i = 0; i < sizeof channels / sizeof channels[0]; i++)
      if (!strcmp(tok, channels[i].name)) log_mask |= channels[i].bit;
  }
}

int em_log_enabled(unsigned channel) {
  pthread_once(&log_once, log_init);
  return (log_mask & channel) != 0;
}

void em_log(unsigned channel, const char *fmt, ...) {
  if (!em_log_enabled(channel)) return;
  static const char *const names[] = {"dispatch", "cache", "memory", "driver"};
  const char *name = "log";
  for (unsigned i = 0; i < 4; i++)
    if (channel == (1u << i)) name = names[i];
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "ember[%s]: %s\n", name, line);
}
