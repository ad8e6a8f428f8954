/* What the probed facts imply (probe.h): forward-compat eligibility, the
 * driver a runtime library needs, a library's lowest CC, and what a GPU's
 * product name says about its brand and compute capability. Data comes from
 * arch_table; the rules cite shared/reference. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "arch_table.h"
#include "probe.h"

/* --------------------------------------------------------------- brands --- */

const char *gc_probe_brand_name(int brand) {
  /* nvmlBrandType_t (pynvml, NVIDIA): 0 unknown ... 16 Titan RTX. */
  static const char *const names[] = {"unknown",        "Quadro",        "Tesla",       "NVS",         "GRID",
                                      "GeForce",        "Titan",         "NVIDIA vApps", "NVIDIA VPC", "NVIDIA VCS",
                                      "NVIDIA vWS",     "NVIDIA Cloud Gaming", "Quadro RTX", "NVIDIA RTX", "NVIDIA",
                                      "GeForce RTX",    "Titan RTX"};
  if (brand < 0 || brand >= (int)(sizeof names / sizeof *names)) return "unknown";
  return names[brand];
}

int gc_probe_brand_from_name(const char *name) {
  if (!name) return -1;
  /* Consumer names are unambiguous, and are what forward compatibility refuses. */
  if (strcasestr(name, "GeForce")) return 5;
  if (strcasestr(name, "TITAN")) return 6;
  if (strcasestr(name, "Quadro")) return 1;
  if (strcasestr(name, "Tesla")) return 2;
  return -1;
}

/* ------------------------------------------------------------ CC by name --- */

/* Does pattern (arch_table's "GeForce RTX 30xx", "A100", "Tesla T4") occur in
 * name as whole words, case-insensitively, an 'x' after a digit or as the
 * first char matching any digit? */
static int occurs(const char *name, const char *pat, size_t pn) {
  size_t nn = strlen(name);
  for (size_t s = 0; s + pn <= nn; s++) {
    if (s && isalnum((unsigned char)name[s - 1])) continue;
    size_t i = 0;
    for (; i < pn; i++) {
      char p = pat[i], c = name[s + i];
      int wild = (p == 'x' || p == 'X') && i > 0 && (isdigit((unsigned char)pat[i - 1]) || pat[i - 1] == 'x' || pat[i - 1] == 'X' ||
                                                     (pat[i - 1] == 'P' && i + 1 < pn));
      if (wild ? !isdigit((unsigned char)c) : tolower((unsigned char)p) != tolower((unsigned char)c)) break;
    }
    if (i == pn && !isalnum((unsigned char)name[s + pn])) return 1;
  }
  return 0;
}

int gc_probe_cc_from_name(const char *name) {
  if (!name || !*name) return 0;
  int best = 0;
  size_t best_len = 0;
  for (size_t r = 0; r < em_arch_count(); r++) {
    const em_arch_row *row = em_arch_at(r);
    if (!row->gpus) continue;
    const char *p = row->gpus;
    while (*p) {
      while (*p == ' ' || *p == ';') p++;
      const char *e = p;
      while (*e && *e != ';' && *e != '(' && *e != '/') e++;
      size_t n = (size_t)(e - p);
      while (n && p[n - 1] == ' ') n--;
      /* "RTX 6000/5000 Ada": only the first alternative, which is a full name. */
      if (n >= 2 && occurs(name, p, n) && n > best_len) best = row->cc, best_len = n;
      while (*e && *e != ';') e++;
      p = e;
    }
  }
  return best;
}

/* ---------------------------------------------------------- forward compat --- */

static int listed(const int *list, int n, int v) {
  for (int i = 0; i < n; i++)
    if (list[i] == v) return 1;
  return 0;
}

static void list_text(const int *list, int n, char *out, size_t cap, int brands) {
  out[0] = '\0';
  for (int i = 0; i < n; i++) {
    size_t len = strlen(out);
    if (brands) snprintf(out + len, cap - len, "%s%s (%d)", i ? ", " : "", gc_probe_brand_name(list[i]), list[i]);
    else snprintf(out + len, cap - len, "%s%d", i ? ", " : "", list[i]);
  }
}

int gc_rule_fwd(const gc_fwd_note *n, int kmod_branch, int brand, char *why, size_t cap) {
  char list[400];
  if (!n || !n->found) {
    snprintf(why, cap, "the compat library carries no readable .note.cuda.fwd_compatibility%s%s", n && n->error[0] ? ": " : "",
             n && n->error[0] ? n->error : "");
    return -1;
  }
  /* 804: "forward compatibility was attempted on non supported HW" (cuda-compat.md 6);
   * the note's Device list names the NVML brands it runs on. */
  if (n->has_devices && brand >= 0 && !listed(n->devices, n->n_devices, brand)) {
    list_text(n->devices, n->n_devices, list, sizeof list, 1);
    snprintf(why, cap, "the GPU's brand %s (%d) is not among the brands this compat library runs on: %s", gc_probe_brand_name(brand),
             brand, list);
    return 804;
  }
  /* 803: the user-mode driver does not match the kernel module (cuda-compat.md 6);
   * the note's Driver list names the kernel-module branches it pairs with. */
  if (n->has_drivers && kmod_branch > 0 && !listed(n->drivers, n->n_drivers, kmod_branch)) {
    list_text(n->drivers, n->n_drivers, list, sizeof list, 0);
    snprintf(why, cap, "the host's kernel module is branch %d, not among the branches this compat library runs on: %s", kmod_branch,
             list);
    return 803;
  }
  if (!n->has_devices || !n->has_drivers) {
    snprintf(why, cap, "the note lists no %s (a Jetson compat package says only its CUDA version)",
             !n->has_devices && !n->has_drivers ? "branches or brands" : !n->has_devices ? "brands" : "branches");
    return -1;
  }
  if (brand < 0 || kmod_branch <= 0) {
    snprintf(why, cap, "%s%s%s unknown", brand < 0 ? "the GPU's brand is" : "", brand < 0 && kmod_branch <= 0 ? " and " : "",
             kmod_branch <= 0 ? "the host's kernel-module branch is" : "");
    return -1;
  }
  snprintf(why, cap, "branch %d and brand %s are both listed in the compat library's note", kmod_branch, gc_probe_brand_name(brand));
  return 0;
}

/* ---------------------------------------------------------- runtime needs --- */

int gc_rule_runtime(int lib_cuda, int lib_minor_known, int drv_cuda, const char *drv, char *why, size_t cap, char *need,
                    size_t need_cap) {
  char lb[16], db[16];
  int M = lib_cuda / 1000;
  if (lib_minor_known) snprintf(lb, sizeof lb, "%d.%d", M, (lib_cuda % 1000) / 10);
  else snprintf(lb, sizeof lb, "%d.x", M);
  snprintf(db, sizeof db, "%d.%d", drv_cuda / 1000, (drv_cuda % 1000) / 10);
  const char *own = lib_minor_known ? em_toolkit_min_linux_driver(lib_cuda) : NULL;
  const char *floor = em_mvc_floor_linux(M);
  snprintf(need, need_cap, "%s", own ? own : floor ? floor : "");
  if (drv_cuda <= 0) {
    snprintf(why, cap, "the driver's CUDA version is unknown");
    return -1;
  }
  if (lib_cuda < 11000) {
    /* Before CUDA 11 there is no minor-version compatibility: the driver must be
     * at least the runtime's version (cuda-compat.md 0.1 step 2, 2.2). */
    if (drv_cuda >= lib_cuda) {
      snprintf(why, cap, "CUDA %s needs a driver for CUDA >= %s; the driver supports %s", lb, lb, db);
      return 0;
    }
    snprintf(why, cap, "CUDA %s needs a driver for CUDA >= %s (no minor-version compatibility before CUDA 11); the driver supports only %s",
             lb, lb, db);
    return 35;
  }
  /* CUDA 11+: same major and at least the major's floor (cuda-compat.md 2.2). */
  if (drv_cuda / 1000 < M) {
    snprintf(why, cap, "CUDA %s needs a driver for CUDA %d.0 or newer%s%s%s; the driver supports only CUDA %s", lb, M,
             floor ? " (at least " : "", floor ? floor : "", floor ? ")" : "", db);
    return 35;
  }
  gc_version have, min;
  if (drv_cuda / 1000 == M && drv && floor && gc_probe_parse_version(drv, strlen(drv), &have) == 0 &&
      gc_probe_parse_version(floor, strlen(floor), &min) == 0 && gc_probe_version_cmp(&have, &min) < 0) {
    snprintf(why, cap, "CUDA %s needs driver %s or newer (the minor-version-compatibility floor of CUDA %d); the driver is %s", lb,
             floor, M, drv);
    return 35;
  }
  if (lib_minor_known && drv_cuda < lib_cuda) {
    snprintf(why, cap, "CUDA %s on a CUDA %s driver runs through minor-version compatibility: APIs newer than %s fail with 36 "
                       "(cudaErrorCallRequiresNewerDriver) and PTX from CUDA %s cannot be JIT-compiled (222)",
             lb, db, db, lb);
    return 1;
  }
  snprintf(why, cap, "CUDA %s runs on this CUDA %s driver", lb, db);
  return 0;
}

/* ----------------------------------------------------------- lowest CC --- */

int gc_rule_lib_lowest_cc(const char *library, const gc_version *v, int *highest, const char **row_version) {
  return em_libreq_lowest_cc(library, v->major, v->minor, v->patch, highest, row_version);
}
