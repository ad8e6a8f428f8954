/* Lookups over the row arrays generated from the TSV files in arch_table/data.
 * The tables are small (a few hundred rows at most), so every lookup is a linear scan and
 * none depends on the order of rows in a file, except the NVRTC table, which
 * gen.sh keeps newest first. */
#include "arch_table.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "arch_table_data.h"

/* ---- compute capabilities ---- */

size_t em_arch_count(void) { return em_at_arch_count; }

const em_arch_row *em_arch_at(size_t i) {
  return i < em_at_arch_count ? &em_at_arch_rows[i] : NULL;
}

const em_arch_row *em_arch_lookup(int cc) {
  for (size_t i = 0; i < em_at_arch_count; i++)
    if (em_at_arch_rows[i].cc == cc) return &em_at_arch_rows[i];
  return NULL;
}

const char *em_arch_name(int cc) {
  /* Thread-local so concurrent callers naming different unknown CCs do not
   * overwrite each other's text. */
  static _Thread_local char unknown[40];
  const em_arch_row *row = em_arch_lookup(cc);
  if (row) return row->arch;
  if (cc < 0)
    snprintf(unknown, sizeof unknown, "unknown (CC %d)", cc);
  else
    snprintf(unknown, sizeof unknown, "unknown (CC %d.%d)", cc / 10, cc % 10);
  return unknown;
}

/* ---- toolkits ---- */

size_t em_toolkit_count(void) { return em_at_toolkit_count; }

const em_toolkit_row *em_toolkit_at(size_t i) {
  return i < em_at_toolkit_count ? &em_at_toolkit_rows[i] : NULL;
}

const em_toolkit_row *em_toolkit_lookup(int cuda) {
  for (size_t i = 0; i < em_at_toolkit_count; i++)
    if (em_at_toolkit_rows[i].cuda == cuda) return &em_at_toolkit_rows[i];
  return NULL;
}

/* True if the comma-separated list holds exactly the target sm+variant
 * ("90a" matches sm 90 with 'a' only; "90" matches the plain target only). */
static int targets_contain(const char *list, int sm, char variant) {
  const char *p = list;
  while (*p) {
    int n = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9') {
      if (n < 100000) n = n * 10 + (*p - '0');
      p++;
      digits++;
    }
    char v = 0;
    if (*p == 'a' || *p == 'f') v = *p++;
    if (digits > 0 && n == sm && v == variant) return 1;
    /* Skip whatever is left of this entry; gen.sh guarantees the syntax, this
     * only keeps a hand-made row from looping forever. */
    while (*p && *p != ',') p++;
    if (*p == ',') p++;
  }
  return 0;
}

int em_toolkit_supports_sm(int cuda, int sm, char variant) {
  if (variant != 0 && variant != 'a' && variant != 'f') return 0;
  if (sm <= 0) return 0;
  const em_toolkit_row *row = em_toolkit_lookup(cuda);
  if (!row) return 0;
  return targets_contain(row->targets, sm, variant);
}

int em_toolkit_ptx_isa(int cuda) {
  const em_toolkit_row *row = em_toolkit_lookup(cuda);
  return row ? row->ptx_isa : 0;
}

const char *em_toolkit_min_linux_driver(int cuda) {
  const em_toolkit_row *row = em_toolkit_lookup(cuda);
  return row ? row->linux_driver : NULL;
}

/* ---- PTX ISA and drivers ---- */

int em_ptx_isa_min_driver(int ptx_isa) {
  for (size_t i = 0; i < em_at_ptx_isa_count; i++)
    if (em_at_ptx_isa_rows[i].ptx_isa == ptx_isa) return em_at_ptx_isa_rows[i].min_cuda;
  return 0;
}

int em_cubin_min_driver(int cuda) {
  if (cuda <= 0) return 0;
  /* Minor-version compatibility (CUDA 11+): any driver of the same major
   * loads the cubin (reference 2.2), and any later driver through backward
   * compatibility. NVIDIA, "Minor Version Compatibility"
   * (https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html):
   * "From CUDA 11 onwards, applications compiled with a CUDA Toolkit release
   * from within a CUDA major release family can run, with limited
   * feature-set, on systems having at least the minimum required driver
   * version" (11.x: >= 450, 12.x: >= 525, 13.x: >= 580); before CUDA 11 "the
   * minimum required driver version is the same as the driver that's
   * packaged as part of that toolkit release". So a CUDA 11.8 cubin (ptxas
   * 11.8) needs cuDriverGetVersion >= 11000. One gap: the 11.x floor is
   * exactly 450.80.02, and an earlier R450 driver also reports 11000; the
   * loader then sees the driver refuse the cubin and takes the next
   * candidate (the legacy PTX). */
  if (cuda >= 11000) return (cuda / 1000) * 1000;
  return cuda;
}

static const char *mvc_floor(int cuda_major, const char *os) {
  for (size_t i = 0; i < em_at_mvc_count; i++) {
    const em_at_mvc_row *r = &em_at_mvc_rows[i];
    if (r->cuda_major == cuda_major && strcmp(r->os, os) == 0) return r->min_driver;
  }
  return NULL;
}

const char *em_mvc_floor_linux(int cuda_major) { return mvc_floor(cuda_major, "linux"); }

const char *em_mvc_floor_windows(int cuda_major) { return mvc_floor(cuda_major, "windows"); }

size_t em_driver_branch_count(void) { return em_at_driver_branch_count; }

const em_driver_branch_row *em_driver_branch_at(size_t i) {
  return i < em_at_driver_branch_count ? &em_at_driver_branch_rows[i] : NULL;
}

/* Branch number of a driver version "535.104.05", "535" or "535.104.05\n"
 * (as nvidia-smi and /proc/driver/nvidia/version print it); -1 when the text
 * is not DIGITS(.DIGITS)* with optional trailing whitespace. */
static int parse_branch(const char *s) {
  if (!s) return -1;
  int branch = 0;
  int digits = 0;
  const char *p = s;
  while (*p >= '0' && *p <= '9') {
    if (digits >= 6) return -1; /* no real branch has more than 3 digits */
    branch = branch * 10 + (*p - '0');
    p++;
    digits++;
  }
  if (digits == 0) return -1;
  while (*p == '.') {
    p++;
    if (!(*p >= '0' && *p <= '9')) return -1;
    while (*p >= '0' && *p <= '9') p++;
  }
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  return *p == '\0' ? branch : -1;
}

int em_driver_cuda_version(const char *driver_version, int *estimated) {
  if (estimated) *estimated = 0;
  int branch = parse_branch(driver_version);
  if (branch < 0) return 0;
  const em_driver_branch_row *best = NULL;
  for (size_t i = 0; i < em_at_driver_branch_count; i++) {
    const em_driver_branch_row *r = &em_at_driver_branch_rows[i];
    if (r->branch == branch) return r->cuda;
    if (r->branch < branch && (!best || r->branch > best->branch)) best = r;
  }
  if (!best) return 0;
  /* An unlisted branch reports at least what the branch before it did. */
  if (estimated) *estimated = 1;
  return best->cuda;
}

/* ---- NVRTC, libraries, PyTorch ---- */

size_t em_nvrtc_count(void) { return em_at_nvrtc_count; }

const em_nvrtc_row *em_nvrtc_at(size_t i) {
  return i < em_at_nvrtc_count ? &em_at_nvrtc_rows[i] : NULL;
}

size_t em_libreq_count(void) { return em_at_libreq_count; }

const em_libreq_row *em_libreq_at(size_t i) {
  return i < em_at_libreq_count ? &em_at_libreq_rows[i] : NULL;
}

/* A libreq version "9.0.0-9.5.1", "9.11+", "9.17.0" or "12" as a range
 * [lo, hi] of {major, minor, patch} (minor -1: the whole major), *open when
 * it has no upper end within its major. -1 when malformed. */
typedef struct lr_version { int v[3]; } lr_version;

static int parse_dotted(const char *s, size_t n, lr_version *out) {
  int k = 0, digits = 0;
  out->v[0] = 0, out->v[1] = out->v[2] = -1;
  for (size_t i = 0; i < n; i++) {
    if (s[i] >= '0' && s[i] <= '9' && digits < 6) {
      if (out->v[k] < 0) out->v[k] = 0;
      out->v[k] = out->v[k] * 10 + (s[i] - '0');
      digits++;
    } else if (s[i] == '.' && digits && k < 2) {
      k++, digits = 0;
    } else {
      return -1;
    }
  }
  return digits ? 0 : -1;
}

static int row_range(const char *text, lr_version *lo, lr_version *hi, int *open) {
  const char *dash = strchr(text, '-');
  size_t n = dash ? (size_t)(dash - text) : strlen(text);
  *open = n && text[n - 1] == '+';
  if (parse_dotted(text, n - (size_t)*open, lo)) return -1;
  return dash ? parse_dotted(dash + 1, strlen(dash + 1), hi) : (*hi = *lo, 0);
}

static int version_cmp(const lr_version *a, const lr_version *b) { /* absent parts count as 0 */
  for (int i = 0; i < 3; i++) {
    int x = a->v[i] < 0 ? 0 : a->v[i], y = b->v[i] < 0 ? 0 : b->v[i];
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

int em_libreq_lowest_cc(const char *library, int major, int minor, int patch, int *highest, const char **row_version) {
  lr_version v = {{major, minor, minor < 0 ? -1 : patch}}, best_lo = {{0, 0, 0}};
  int low = 0, high = 0, have_best = 0;
  const char *row_v = NULL;
  /* Rows whose range holds v; else the nearest row below v in the same major
   * (the requirement in force since that release). */
  for (int pass = 0; pass < 2 && !low; pass++) {
    for (size_t i = 0; i < em_at_libreq_count; i++) {
      const em_libreq_row *r = &em_at_libreq_rows[i];
      lr_version lo, hi;
      int open, match;
      if (strcmp(r->library, library) || row_range(r->version, &lo, &hi, &open) || lo.v[0] != major) continue;
      if (lo.v[1] < 0) match = 1; /* a whole major ("12") */
      else if (pass == 0) match = version_cmp(&lo, &v) <= 0 && (open || version_cmp(&v, &hi) <= 0);
      else match = have_best && !version_cmp(&lo, &best_lo);
      if (pass == 0 && !match && version_cmp(&lo, &v) <= 0 && (!have_best || version_cmp(&lo, &best_lo) > 0))
        best_lo = lo, have_best = 1;
      if (!match) continue;
      if (!low || r->lowest_cc < low) low = r->lowest_cc;
      if (r->lowest_cc > high) high = r->lowest_cc;
      row_v = r->version;
    }
  }
  if (highest) *highest = high;
  if (row_version) *row_version = row_v;
  return low;
}

size_t em_torch_count(void) { return em_at_torch_count; }

const em_torch_row *em_torch_at(size_t i) {
  return i < em_at_torch_count ? &em_at_torch_rows[i] : NULL;
}

/* "1.12" and "1.12.1" match a "1.12" row; "1.120" and "1.1" do not. */
static int release_matches(const char *row_release, const char *release) {
  size_t n = strlen(row_release);
  if (strncmp(row_release, release, n) != 0) return 0;
  return release[n] == '\0' || release[n] == '.';
}

const em_torch_row *em_torch_lookup(const char *release, const char *variant) {
  if (!release || !variant) return NULL;
  for (size_t i = 0; i < em_at_torch_count; i++) {
    const em_torch_row *r = &em_at_torch_rows[i];
    if (strcmp(r->variant, variant) == 0 && release_matches(r->release, release)) return r;
  }
  return NULL;
}

/* ---- CUDA error codes ---- */

size_t em_cuda_error_count(void) { return em_at_cuda_error_count; }

const em_cuda_error_row *em_cuda_error_at(size_t i) {
  return i < em_at_cuda_error_count ? &em_at_cuda_error_rows[i] : NULL;
}

const em_cuda_error_row *em_cuda_error_lookup(const char *api, int number) {
  if (!api) return NULL;
  for (size_t i = 0; i < em_at_cuda_error_count; i++) {
    const em_cuda_error_row *r = &em_at_cuda_error_rows[i];
    if (r->number == number && strcmp(r->api, api) == 0) return r;
  }
  return NULL;
}

const em_cuda_error_row *em_cuda_error_by_name(const char *name) {
  if (!name) return NULL;
  /* gen.sh refuses two names that differ only in case, so the first match is the only one. */
  for (size_t i = 0; i < em_at_cuda_error_count; i++)
    if (strcasecmp(em_at_cuda_error_rows[i].name, name) == 0) return &em_at_cuda_error_rows[i];
  return NULL;
}

/* ------------------------------------------------------- arch support --- */

size_t em_arch_support_count(void) { return em_at_arch_support_count; }

const em_arch_support_row *em_arch_support_at(size_t i) {
  return i < em_at_arch_support_count ? &em_at_arch_support_rows[i] : NULL;
}

const em_arch_support_row *em_arch_support_lookup(const char *arch) {
  for (size_t i = 0; arch && i < em_at_arch_support_count; i++)
    if (!strcmp(em_at_arch_support_rows[i].arch, arch)) return &em_at_arch_support_rows[i];
  return NULL;
}

/* ---- sources ---- */

size_t em_source_count(void) { return em_at_source_count; }

const em_source_row *em_source_at(size_t i) {
  return i < em_at_source_count ? &em_at_source_rows[i] : NULL;
}

const em_source_row *em_source_lookup(const char *key) {
  for (size_t i = 0; key && i < em_at_source_count; i++)
    if (!strcmp(em_at_source_rows[i].key, key)) return &em_at_source_rows[i];
  return NULL;
}

size_t em_source_urls(const char *keys, void (*fn)(const char *url, void *ctx), void *ctx) {
  size_t n = 0;
  for (const char *p = keys; p && *p;) {
    size_t len = strcspn(p, ",");
    for (size_t i = 0; i < em_at_source_count; i++) {
      const em_source_row *r = &em_at_source_rows[i];
      if (strlen(r->key) == len && !strncmp(r->key, p, len) && r->url[0]) {
        if (fn) fn(r->url, ctx);
        n++;
        break;
      }
    }
    p += len;
    if (*p == ',') p++;
  }
  return n;
}

static void keep_first(const char *url, void *ctx) {
  const char **first = ctx;
  if (!*first) *first = url;
}

const char *em_source_url(const char *keys) {
  const char *first = NULL;
  em_source_urls(keys, keep_first, &first);
  return first;
}
