/* Configuration of the fake libcuda from the environment (README.md lists
 * the variables): the devices it pretends to have, the driver version, the
 * memory per device, fault injection, the JIT switches and
 * CUDA_VISIBLE_DEVICES, which is applied the way the real driver does. */
#include <ctype.h>
#include <stdarg.h>
#include <time.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda_internal.h"

#define DEFAULT_DRIVER 13000
#define DEFAULT_MEM_MB 16384ull
#define MAX_MEM_MB (1ull << 24) /* 16 TiB: beyond any GPU, still no size_t overflow */

static const char *const entry_names[FC_N_ENTRIES] = {
#define FC_NAME(name, plain) #name,
    FC_ENTRY_LIST(FC_NAME)
#undef FC_NAME
};

static const char *const entry_plain[FC_N_ENTRIES] = {
#define FC_PLAIN(name, plain) plain,
    FC_ENTRY_LIST(FC_PLAIN)
#undef FC_PLAIN
};

const char *fc_entry_name(fc_entry e) { return (unsigned)e < FC_N_ENTRIES ? entry_names[e] : "?"; }

int fc_entry_lookup(const char *name, size_t len, fc_entry *out) {
  for (int i = 0; i < FC_N_ENTRIES; i++) {
    const char *n = entry_names[i], *p = entry_plain[i];
    if ((strlen(n) == len && memcmp(n, name, len) == 0) || (p && strlen(p) == len && memcmp(p, name, len) == 0)) {
      *out = (fc_entry)i;
      return 0;
    }
  }
  return -1;
}

static int set_error(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int set_error(char *err, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (err && cap) vsnprintf(err, cap, fmt, ap);
  va_end(ap);
  return -1;
}

/* Reads a decimal number of at most max_digits digits from [*p, end). */
static int read_uint(const char **p, const char *end, int max_digits, unsigned long long *out) {
  unsigned long long v = 0;
  int digits = 0;
  while (*p < end && isdigit((unsigned char)**p)) {
    if (++digits > max_digits) return -1;
    v = v * 10 + (unsigned)(**p - '0');
    (*p)++;
  }
  if (!digits) return -1;
  *out = v;
  return 0;
}

/* Trims blanks from both ends of [*b, *e). */
static void trim(const char **b, const char **e) {
  while (*b < *e && isspace((unsigned char)**b)) (*b)++;
  while (*e > *b && isspace((unsigned char)(*e)[-1])) (*e)--;
}

/* A whole-string unsigned number within [lo, hi]. */
static int parse_number(const char *s, unsigned long long lo, unsigned long long hi, unsigned long long *out) {
  const char *b = s, *e = s + strlen(s);
  trim(&b, &e);
  if (read_uint(&b, e, 12, out) != 0 || b != e || *out < lo || *out > hi) return -1;
  return 0;
}

/* One FAKECUDA_DEVICES item: "X.Y" or "X.Y=Name". */
static int parse_device(const char *b, const char *e, fc_device_cfg *d, char *err, size_t cap) {
  const char *p = b;
  unsigned long long major, minor;
  if (read_uint(&p, e, 2, &major) != 0 || major < 1 || p >= e || *p != '.')
    return set_error(err, cap, "FAKECUDA_DEVICES: '%.*s' is not a compute capability X.Y (e.g. 8.6)", (int)(e - b), b);
  p++;
  if (read_uint(&p, e, 1, &minor) != 0)
    return set_error(err, cap, "FAKECUDA_DEVICES: '%.*s': the minor version must be one digit", (int)(e - b), b);
  d->major = (int)major;
  d->minor = (int)minor;
  const char *n = p;
  if (n < e && *n == '=') {
    n++;
    const char *ne = e;
    trim(&n, &ne);
    if (n == ne || ne - n >= FC_NAME_MAX)
      return set_error(err, cap, "FAKECUDA_DEVICES: '%.*s': the name after '=' must have 1 to %d characters",
                       (int)(e - b), b, FC_NAME_MAX - 1);
    memcpy(d->name, n, (size_t)(ne - n));
    d->name[ne - n] = '\0';
  } else if (n == e) {
    snprintf(d->name, sizeof d->name, "Fake GPU (CC %d.%d)", d->major, d->minor);
  } else {
    return set_error(err, cap, "FAKECUDA_DEVICES: '%.*s': expected '=' and a name after the compute capability",
                     (int)(e - b), b);
  }
  return 0;
}

static int parse_devices(const char *s, fc_config *cfg, char *err, size_t cap) {
  cfg->n_phys = 0;
  if (!s) return 0;
  const char *all_b = s, *all_e = s + strlen(s);
  trim(&all_b, &all_e);
  if (all_b == all_e) return 0;
  for (const char *b = all_b; b <= all_e;) {
    const char *e = memchr(b, ',', (size_t)(all_e - b));
    if (!e) e = all_e;
    const char *ib = b, *ie = e;
    trim(&ib, &ie);
    if (ib == ie) return set_error(err, cap, "FAKECUDA_DEVICES: empty item in '%s'", s);
    if (cfg->n_phys == FC_MAX_DEVICES)
      return set_error(err, cap, "FAKECUDA_DEVICES: more than %d devices", FC_MAX_DEVICES);
    if (parse_device(ib, ie, &cfg->phys[cfg->n_phys], err, cap) != 0) return -1;
    cfg->n_phys++;
    b = e + 1;
  }
  return 0;
}

/* One FAKECUDA_FAIL item: "name=code" or "name=code@N". */
static int parse_rule(const char *b, const char *e, fc_fail_rule *r, char *err, size_t cap) {
  const char *eq = memchr(b, '=', (size_t)(e - b));
  if (!eq) return set_error(err, cap, "FAKECUDA_FAIL: '%.*s' is not name=code[@N]", (int)(e - b), b);
  const char *nb = b, *ne = eq;
  trim(&nb, &ne);
  if (fc_entry_lookup(nb, (size_t)(ne - nb), &r->entry) != 0)
    return set_error(err, cap, "FAKECUDA_FAIL: '%.*s' is not an entry point of the fake (see README.md)",
                     (int)(ne - nb), nb);
  const char *p = eq + 1, *pe = e;
  trim(&p, &pe);
  unsigned long long code, nth = 0;
  if (read_uint(&p, pe, 6, &code) != 0 || code == 0)
    return set_error(err, cap, "FAKECUDA_FAIL: '%.*s': the code must be a non-zero CUresult number", (int)(e - b), b);
  if (p < pe && *p == '@') {
    p++;
    if (read_uint(&p, pe, 9, &nth) != 0 || nth == 0)
      return set_error(err, cap, "FAKECUDA_FAIL: '%.*s': the call number after '@' must be 1 or more", (int)(e - b), b);
  }
  if (p != pe) return set_error(err, cap, "FAKECUDA_FAIL: '%.*s': unexpected text after the code", (int)(e - b), b);
  r->code = (CUresult)code;
  r->nth = (unsigned long)nth;
  return 0;
}

static int parse_rules(const char *s, fc_config *cfg, char *err, size_t cap) {
  cfg->n_rules = 0;
  if (!s) return 0;
  const char *all_b = s, *all_e = s + strlen(s);
  trim(&all_b, &all_e);
  if (all_b == all_e) return 0;
  for (const char *b = all_b; b <= all_e;) {
    const char *e = memchr(b, ',', (size_t)(all_e - b));
    if (!e) e = all_e;
    if (cfg->n_rules == FC_MAX_FAIL_RULES)
      return set_error(err, cap, "FAKECUDA_FAIL: more than %d rules", FC_MAX_FAIL_RULES);
    if (parse_rule(b, e, &cfg->rules[cfg->n_rules], err, cap) != 0) return -1;
    cfg->n_rules++;
    b = e + 1;
  }
  return 0;
}

void fc_uuid_of(int phys, CUuuid *u) {
  /* Any fixed formula does; this one gives every physical index (< 256) a
   * different first byte, so a short "GPU-xx" prefix already names one device. */
  for (int i = 0; i < 16; i++) u->bytes[i] = (unsigned char)((phys * 37 + i * 13 + 0x5a) & 0xff);
}

void fc_uuid_string(const CUuuid *u, char out[41]) {
  static const char hex[] = "0123456789abcdef";
  char *p = out;
  memcpy(p, "GPU-", 4);
  p += 4;
  for (int i = 0; i < 16; i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10) *p++ = '-';
    *p++ = hex[u->bytes[i] >> 4];
    *p++ = hex[u->bytes[i] & 15];
  }
  *p = '\0';
}

/* One CUDA_VISIBLE_DEVICES item to a physical index, or -1 when invalid. */
static int visible_item(const char *b, const char *e, const fc_config *cfg) {
  if (b == e) return -1;
  if (isdigit((unsigned char)*b)) {
    const char *p = b;
    unsigned long long v;
    if (read_uint(&p, e, 6, &v) != 0 || p != e || v >= (unsigned long long)cfg->n_phys) return -1;
    return (int)v;
  }
  size_t n = (size_t)(e - b);
  if (n <= 4 || memcmp(b, "GPU-", 4) != 0) return -1; /* MIG-..., -1 and anything else stop the list */
  int found = -1;
  for (int i = 0; i < cfg->n_phys; i++) {
    CUuuid u;
    char s[41];
    fc_uuid_of(i, &u);
    fc_uuid_string(&u, s);
    if (n <= strlen(s) && memcmp(s, b, n) == 0) {
      if (found >= 0) return -1; /* an ambiguous prefix names no device */
      found = i;
    }
  }
  return found;
}

/* CUDA_VISIBLE_DEVICES as the real driver reads it: ordinals or UUID
 * prefixes, in the order given; the list ends at the first invalid item
 * (out of range, unknown, repeated); set but empty hides every device. */
static void apply_visible(const char *s, fc_config *cfg) {
  cfg->n_visible = 0;
  if (!s) {
    for (int i = 0; i < cfg->n_phys; i++) cfg->visible[cfg->n_visible++] = i;
    return;
  }
  const char *end = s + strlen(s);
  for (const char *b = s; b < end;) {
    const char *e = memchr(b, ',', (size_t)(end - b));
    if (!e) e = end;
    const char *ib = b, *ie = e;
    trim(&ib, &ie);
    int phys = visible_item(ib, ie, cfg);
    for (int k = 0; phys >= 0 && k < cfg->n_visible; k++)
      if (cfg->visible[k] == phys) phys = -1;
    if (phys < 0) return;
    cfg->visible[cfg->n_visible++] = phys;
    b = e + 1;
  }
}

static int flag_set(const char *name) {
  const char *v = getenv(name);
  return v && *v && strcmp(v, "0") != 0;
}

int fc_config_driver(int *out, char *err, size_t cap) {
  const char *s = getenv("FAKECUDA_DRIVER");
  unsigned long long v = DEFAULT_DRIVER;
  if (s && parse_number(s, 1000, 999990, &v) != 0)
    return set_error(err, cap, "FAKECUDA_DRIVER: '%s' is not a driver version like 12080 (1000*major + 10*minor)", s);
  *out = (int)v;
  return 0;
}

int fc_config_read(fc_config *cfg, char *err, size_t cap) {
  memset(cfg, 0, sizeof *cfg);
  if (parse_devices(getenv("FAKECUDA_DEVICES"), cfg, err, cap) != 0) return -1;
  if (fc_config_driver(&cfg->driver, err, cap) != 0) return -1;
  const char *m = getenv("FAKECUDA_MEM_MB");
  unsigned long long mb = DEFAULT_MEM_MB;
  if (m && parse_number(m, 1, MAX_MEM_MB, &mb) != 0)
    return set_error(err, cap, "FAKECUDA_MEM_MB: '%s' is not a size in MiB between 1 and %llu", m, MAX_MEM_MB);
  cfg->mem_bytes = (size_t)(mb << 20);
  if (parse_rules(getenv("FAKECUDA_FAIL"), cfg, err, cap) != 0) return -1;
  const char *seed = getenv("FAKECUDA_SEED");
  if (seed && *seed) {
    char *end;
    cfg->seed = strtoull(seed, &end, 0);
    if (*end || cfg->seed == 0)
      return set_error(err, cap, "FAKECUDA_SEED: '%s' is not a non-zero number (it seeds the orders the double draws)", seed);
  } else {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    cfg->seed = ((unsigned long long)t.tv_sec * 1000003u ^ (unsigned long long)t.tv_nsec ^ (unsigned long long)getpid() << 20) | 1u;
  }
  cfg->no_jit = flag_set("FAKECUDA_NO_JIT");
  cfg->jit_disabled = flag_set("CUDA_DISABLE_PTX_JIT");
  cfg->force_ptx_jit = flag_set("CUDA_FORCE_PTX_JIT");
  cfg->no_map_host = flag_set("FAKECUDA_NO_MAP_HOST");
  apply_visible(getenv("CUDA_VISIBLE_DEVICES"), cfg);
  return 0;
}

char *fc_config_snapshot(void) {
  static const char *const vars[] = {"FAKECUDA_DEVICES",   "FAKECUDA_DRIVER",     "FAKECUDA_MEM_MB",
                                     "FAKECUDA_FAIL",      "FAKECUDA_NO_JIT",     "CUDA_DISABLE_PTX_JIT",
                                     "CUDA_FORCE_PTX_JIT", "CUDA_VISIBLE_DEVICES", "FAKECUDA_NO_MAP_HOST"};
  size_t n = 1;
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    n += strlen(vars[i]) + 3 + (v ? strlen(v) : 0);
  }
  char *s = malloc(n), *p = s;
  if (!s) return NULL;
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    /* '=' marks a set variable, '!' an unset one: "" and unset differ for CUDA_VISIBLE_DEVICES. */
    p += sprintf(p, "%s%c%s\n", vars[i], v ? '=' : '!', v ? v : "");
  }
  return s;
}

/* Plausible SM counts of a representative GPU per compute capability
 * (K40, K80, GTX 750 Ti, GTX 980, Jetson Nano, P100, GTX 1080, TX2, V100,
 * Xavier, T4, A100, RTX 3080, Orin, RTX 4090, H100 SXM, B200, Thor, RTX 5090,
 * GB10). Nothing in the fake depends on them beyond being non-zero. */
int fc_sm_count_for(int major, int minor) {
  static const struct {
    int cc, sms;
  } table[] = {{35, 15},  {37, 13},  {50, 5},    {52, 16},   {53, 1},   {60, 56},   {61, 20},
               {62, 2},   {70, 80},  {72, 8},    {75, 40},   {80, 108}, {86, 68},   {87, 16},
               {89, 128}, {90, 132}, {100, 148}, {103, 148}, {110, 20}, {120, 170}, {121, 48}};
  int cc = major * 10 + minor;
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (table[i].cc == cc) return table[i].sms;
  return 16;
}
