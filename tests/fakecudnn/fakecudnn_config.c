/* The environment of the fake libcudnn (README.md, "Configuration"):
 * FAKECUDNN_VERSION, FAKECUDNN_CUDART, FAKECUDNN_FAIL, and two variables of
 * the real world it honours, NVIDIA_TF32_OVERRIDE and FAKECUDA_SEED. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecudnn_internal.h"

static const char *const entry_names[FD_N_ENTRIES] = {
#define FD_NAME(name, fails) #name,
    FD_ENTRY_LIST(FD_NAME)
#undef FD_NAME
};

static const unsigned char entry_fails[FD_N_ENTRIES] = {
#define FD_FAILS(name, fails) fails,
    FD_ENTRY_LIST(FD_FAILS)
#undef FD_FAILS
};

const char *fd_entry_name(fd_entry e) { return (unsigned)e < FD_N_ENTRIES ? entry_names[e] : "?"; }

int fd_entry_can_fail(fd_entry e) { return (unsigned)e < FD_N_ENTRIES && entry_fails[e]; }

int fd_entry_lookup(const char *name, size_t len, fd_entry *out) {
  for (int i = 0; i < FD_N_ENTRIES; i++)
    if (strlen(entry_names[i]) == len && memcmp(entry_names[i], name, len) == 0) {
      *out = (fd_entry)i;
      return 0;
    }
  return -1;
}

static int set_error(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int set_error(char *err, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, cap, fmt, ap);
  va_end(ap);
  return -1;
}

static void trim(const char **b, const char **e) {
  while (*b < *e && isspace((unsigned char)**b)) (*b)++;
  while (*e > *b && isspace((unsigned char)(*e)[-1])) (*e)--;
}

/* A decimal number of 1 to max_digits digits at *p (advanced past it). */
static int read_uint(const char **p, const char *end, int max_digits, unsigned long long *out) {
  unsigned long long v = 0;
  int n = 0;
  while (*p < end && isdigit((unsigned char)**p)) {
    if (++n > max_digits) return -1;
    v = v * 10 + (unsigned long long)(**p - '0');
    (*p)++;
  }
  if (n == 0) return -1;
  *out = v;
  return 0;
}

/* The cudart a version was built with when FAKECUDNN_CUDART does not say:
 * 9.19.0 is the CUDA 13 wheel of the LOCAL experiment (cuda-compat.md
 * section 9.1); 9.11 and later ship for CUDA 13 [U: they ship for 12 too];
 * 9.0 to 9.10 for CUDA 12.9 [U]; 8.9 for CUDA 12.2 [U]. */
static int default_cudart(int major, int minor) {
  if (major == 8) return 12020;
  return minor >= 11 ? 13000 : 12090;
}

/* "9.19.0", "9.10.2", "8.9.7": cuDNN 8.9.x and 9.x are modelled (their
 * lowest compute capabilities are known, cuda-compat.md section 9.1). */
static int parse_version(const char *s, fd_config *cfg, char *err, size_t cap) {
  if (!s) s = "9.19.0";
  const char *p = s, *e = s + strlen(s);
  trim(&p, &e);
  unsigned long long v[3];
  for (int i = 0; i < 3; i++) {
    if (read_uint(&p, e, 3, &v[i]) != 0 || (i < 2 && (p == e || *p != '.')))
      return set_error(err, cap, "FAKECUDNN_VERSION: '%s' is not MAJOR.MINOR.PATCH", s);
    if (i < 2) p++;
  }
  if (p != e) return set_error(err, cap, "FAKECUDNN_VERSION: unexpected text after the patch level in '%s'", s);
  if (!((v[0] == 8 && v[1] == 9) || v[0] == 9) || v[1] > 99 || v[2] > 99)
    return set_error(err, cap, "FAKECUDNN_VERSION: '%s' is not modelled (8.9.x and 9.x are)", s);
  cfg->major = (int)v[0];
  cfg->minor = (int)v[1];
  cfg->patch = (int)v[2];
  return 0;
}

/* FAKECUDNN_CUDART: the cudnnGetCudartVersion value, 1000 major + 10 minor. */
static int parse_cudart(const char *s, fd_config *cfg, char *err, size_t cap) {
  if (!s) {
    cfg->cudart = default_cudart(cfg->major, cfg->minor);
    return 0;
  }
  const char *p = s, *e = s + strlen(s);
  trim(&p, &e);
  unsigned long long v;
  if (read_uint(&p, e, 6, &v) != 0 || p != e || v < 9000)
    return set_error(err, cap, "FAKECUDNN_CUDART: '%s' is not a CUDA version like 12090 (1000 major + 10 minor)", s);
  cfg->cudart = (int)v;
  return 0;
}

/* One FAKECUDNN_FAIL item: "name=status" or "name=status@N" (as FAKECUDA_FAIL). */
static int parse_rule(const char *b, const char *e, fd_fail_rule *r, char *err, size_t cap) {
  const char *eq = memchr(b, '=', (size_t)(e - b));
  if (!eq) return set_error(err, cap, "FAKECUDNN_FAIL: '%.*s' is not name=status[@N]", (int)(e - b), b);
  const char *nb = b, *ne = eq;
  trim(&nb, &ne);
  if (fd_entry_lookup(nb, (size_t)(ne - nb), &r->entry) != 0)
    return set_error(err, cap, "FAKECUDNN_FAIL: '%.*s' is not an entry point of the double (README.md)",
                     (int)(ne - nb), nb);
  if (!fd_entry_can_fail(r->entry))
    return set_error(err, cap, "FAKECUDNN_FAIL: %.*s returns no status", (int)(ne - nb), nb);
  const char *p = eq + 1, *pe = e;
  trim(&p, &pe);
  unsigned long long code, nth = 0;
  if (read_uint(&p, pe, 5, &code) != 0 || code == 0)
    return set_error(err, cap, "FAKECUDNN_FAIL: '%.*s': the status must be a non-zero cudnnStatus_t number",
                     (int)(e - b), b);
  if (p < pe && *p == '@') {
    p++;
    if (read_uint(&p, pe, 9, &nth) != 0 || nth == 0)
      return set_error(err, cap, "FAKECUDNN_FAIL: '%.*s': the call number after '@' must be 1 or more",
                       (int)(e - b), b);
  }
  if (p != pe) return set_error(err, cap, "FAKECUDNN_FAIL: '%.*s': unexpected text after the status", (int)(e - b), b);
  r->code = (int)code;
  r->nth = (unsigned long)nth;
  return 0;
}

static int parse_rules(const char *s, fd_config *cfg, char *err, size_t cap) {
  cfg->n_rules = 0;
  if (!s) return 0;
  const char *all_b = s, *all_e = s + strlen(s);
  trim(&all_b, &all_e);
  if (all_b == all_e) return 0;
  for (const char *b = all_b; b <= all_e;) {
    const char *e = memchr(b, ',', (size_t)(all_e - b));
    if (!e) e = all_e;
    if (cfg->n_rules == FD_MAX_FAIL_RULES)
      return set_error(err, cap, "FAKECUDNN_FAIL: more than %d rules", FD_MAX_FAIL_RULES);
    if (parse_rule(b, e, &cfg->rules[cfg->n_rules], err, cap) != 0) return -1;
    cfg->n_rules++;
    b = e + 1;
  }
  return 0;
}

/* FAKECUDA_SEED seeds the orders of the non-deterministic algorithms as it
 * seeds the libcuda double's (build-tools/run_tests.sh sets one per run);
 * unset or unreadable, the orders start from 1. */
static unsigned long long order_seed(void) {
  const char *s = getenv("FAKECUDA_SEED");
  unsigned long long v = s ? strtoull(s, NULL, 10) : 0;
  return v ? v : 1;
}

int fd_config_read(fd_config *cfg, char *err, size_t cap) {
  memset(cfg, 0, sizeof *cfg);
  if (parse_version(getenv("FAKECUDNN_VERSION"), cfg, err, cap) != 0) return -1;
  if (parse_cudart(getenv("FAKECUDNN_CUDART"), cfg, err, cap) != 0) return -1;
  if (parse_rules(getenv("FAKECUDNN_FAIL"), cfg, err, cap) != 0) return -1;
  /* NVIDIA_TF32_OVERRIDE=0 turns TF32 off in every CUDA library (the
   * variable of the CUDA toolkit documentation); other values change nothing. */
  const char *tf32 = getenv("NVIDIA_TF32_OVERRIDE");
  cfg->tf32_off = tf32 && strcmp(tf32, "0") == 0;
  cfg->seed = order_seed();
  return 0;
}

char *fd_config_snapshot(void) {
  static const char *const vars[] = {"FAKECUDNN_VERSION", "FAKECUDNN_CUDART", "FAKECUDNN_FAIL",
                                     "NVIDIA_TF32_OVERRIDE", "FAKECUDA_SEED"};
  size_t n = 1;
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    n += strlen(vars[i]) + (v ? strlen(v) : 0) + 3;
  }
  char *s = malloc(n);
  if (!s) return NULL;
  size_t at = 0;
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    /* "\x01" marks an unset variable, so unset and empty differ. */
    at += (size_t)snprintf(s + at, n - at, "%s=%s\n", vars[i], v ? v : "\x01");
  }
  return s;
}

/* cuda-compat.md section 9.1 (and arch_table/data/libreq.tsv): 8.9.x and
 * 9.0 to 9.10 need CC 5.0; 9.11 and later CC 7.5 ([S]: Maxwell, Pascal and
 * Volta were dropped after 9.10; the 9.17 matrix, [C], lists 7.5 up). */
int fd_lowest_cc(const fd_config *cfg) {
  if (cfg->major == 9 && cfg->minor >= 11) return 75;
  return 50;
}
