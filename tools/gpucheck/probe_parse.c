/* Parsers of the text gpucheck reads from a system (probe.h): driver version
 * files, per-GPU information files, cgroup files, ld.so.conf, and the
 * variables CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES. Each takes a
 * buffer and its length and reads nothing past it; no allocation, no libc
 * state, so the fuzz target can drive them directly. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "probe.h"

/* ---------------------------------------------------------------- helpers --- */

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }

/* Trims blanks from both ends of [*s, *s + *len). */
static void trim(const char **s, size_t *len) {
  while (*len && is_blank(**s)) (*s)++, (*len)--;
  while (*len && is_blank((*s)[*len - 1])) (*len)--;
}

/* Copies [s, s+len) into out (cap bytes), truncating; always NUL-terminates. */
static void copy_n(char *out, size_t cap, const char *s, size_t len) {
  if (!cap) return;
  size_t n = len < cap - 1 ? len : cap - 1;
  /* An embedded NUL in outside text ends the copy rather than hiding the rest. */
  const char *z = memchr(s, '\0', n);
  if (z) n = (size_t)(z - s);
  memcpy(out, s, n);
  out[n] = '\0';
}

/* The next line of [*p, end): sets *line and *n (no newline), advances *p. */
static int next_line(const char **p, const char *end, const char **line, size_t *n) {
  if (*p >= end) return 0;
  const char *nl = memchr(*p, '\n', (size_t)(end - *p));
  const char *stop = nl ? nl : end;
  *line = *p;
  *n = (size_t)(stop - *p);
  *p = nl ? nl + 1 : end;
  return 1;
}

static int has(const char *s, size_t len, const char *needle) {
  size_t n = strlen(needle);
  return n <= len && memmem(s, len, needle, n) != NULL;
}

/* --------------------------------------------------------------- versions --- */

int gc_probe_parse_version(const char *s, size_t len, gc_version *out) {
  memset(out, 0, sizeof *out);
  out->minor = out->patch = -1;
  if (!s) return -1;
  trim(&s, &len);
  if (!len || len >= sizeof out->text) return -1;
  int parts[4] = {0, -1, -1, -1}, k = 0, digits = 0;
  for (size_t i = 0; i < len; i++) {
    char c = s[i];
    if (c >= '0' && c <= '9') {
      if (++digits > 6) return -1; /* no real version part has more */
      if (parts[k] < 0) parts[k] = 0;
      parts[k] = parts[k] * 10 + (c - '0');
    } else if (c == '.' && digits && k < 3) {
      k++;
      digits = 0;
    } else {
      return -1;
    }
  }
  if (!digits) return -1; /* empty, or ends with '.' */
  out->major = parts[0];
  out->minor = parts[1];
  out->patch = parts[2];
  memcpy(out->text, s, len);
  out->text[len] = '\0';
  return 0;
}

int gc_probe_version_cmp(const gc_version *a, const gc_version *b) {
  int x[3] = {a->major, a->minor < 0 ? 0 : a->minor, a->patch < 0 ? 0 : a->patch};
  int y[3] = {b->major, b->minor < 0 ? 0 : b->minor, b->patch < 0 ? 0 : b->patch};
  for (int i = 0; i < 3; i++)
    if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
  return 0;
}

int gc_probe_soname_version(const char *file, const char *stem, char *ver, size_t cap) {
  if (cap) ver[0] = '\0';
  if (!file || !stem) return -1;
  size_t n = strlen(stem);
  if (strncmp(file, stem, n) || strncmp(file + n, ".so.", 4)) return -1;
  const char *v = file + n + 4;
  gc_version tmp;
  if (gc_probe_parse_version(v, strlen(v), &tmp)) return -1;
  snprintf(ver, cap, "%s", tmp.text);
  return 0;
}

/* ----------------------------------------------------------- kernel module --- */

static const char *const arch_words[] = {"x86_64", "aarch64", "ppc64le", "arm64", "sbsa", NULL};

int gc_probe_parse_proc_version(const char *buf, size_t len, gc_kmod *out) {
  memset(out, 0, sizeof *out);
  out->open = -1;
  snprintf(out->source, sizeof out->source, "/proc/driver/nvidia/version");
  if (!buf || !len) {
    snprintf(out->note, sizeof out->note, "/proc/driver/nvidia/version is empty");
    return -1;
  }
  /* The NVRM line; older and newer banners all start with it, else the first line. */
  const char *p = buf, *end = buf + len, *line = NULL, *first = NULL;
  size_t n = 0, first_n = 0;
  const char *l;
  size_t ln;
  while (next_line(&p, end, &l, &ln)) {
    if (!first) first = l, first_n = ln;
    if (ln >= 13 && !memcmp(l, "NVRM version:", 13)) {
      line = l, n = ln;
      break;
    }
  }
  if (!line) line = first, n = first_n;
  if (!line) return -1;
  if (has(line, n, "Open Kernel Module")) out->open = 1;
  else if (has(line, n, "Kernel Module")) out->open = 0;
  /* Tokens separated by blanks: the architecture word, and the first dotted
   * number of two or more parts (the version; a year alone has one part and a
   * time has colons). The "token after the double space" rule of uv finds the
   * same token in every known format but breaks if spacing changes. */
  size_t i = 0;
  while (i < n) {
    while (i < n && is_blank(line[i])) i++;
    size_t j = i;
    while (j < n && !is_blank(line[j])) j++;
    if (j > i) {
      for (const char *const *a = arch_words; *a; a++)
        if (j - i == strlen(*a) && !memcmp(line + i, *a, j - i) && !out->arch[0]) copy_n(out->arch, sizeof out->arch, line + i, j - i);
      gc_version v;
      if (!out->found && gc_probe_parse_version(line + i, j - i, &v) == 0 && v.minor >= 0) {
        out->v = v;
        out->found = 1;
      }
    }
    i = j;
  }
  if (!out->found) {
    char shown[80];
    copy_n(shown, sizeof shown, line, n);
    snprintf(out->note, sizeof out->note, "no version number in /proc/driver/nvidia/version: '%s'", shown);
    return -1;
  }
  /* Driver branches have had three digits since R173; Jetson's kernel module
   * reports its L4T release (35.3.1), which is no branch. */
  if (out->v.major < 100) {
    out->l4t = 1;
    snprintf(out->note, sizeof out->note, "%s is a Jetson Linux (L4T) release, not a driver branch", out->v.text);
  }
  return 0;
}

int gc_probe_parse_sys_version(const char *buf, size_t len, gc_kmod *out) {
  memset(out, 0, sizeof *out);
  out->open = -1;
  snprintf(out->source, sizeof out->source, "/sys/module/nvidia/version");
  /* Only the first line counts. */
  const char *nl = buf ? memchr(buf, '\n', len) : NULL;
  size_t n = nl ? (size_t)(nl - buf) : len;
  gc_version v;
  if (!buf || gc_probe_parse_version(buf, n, &v) || v.minor < 0) {
    char shown[64];
    copy_n(shown, sizeof shown, buf ? buf : "", buf ? n : 0);
    snprintf(out->note, sizeof out->note, "/sys/module/nvidia/version holds '%s', not a version", shown);
    return -1;
  }
  out->v = v;
  out->found = 1;
  if (v.major < 100) {
    out->l4t = 1;
    snprintf(out->note, sizeof out->note, "%s is a Jetson Linux (L4T) release, not a driver branch", v.text);
  }
  return 0;
}

/* ------------------------------------------------------------ information --- */

int gc_probe_parse_gpu_information(const char *buf, size_t len, gc_proc_gpu *out) {
  char bdf[sizeof out->bdf];
  memcpy(bdf, out->bdf, sizeof bdf); /* the caller's directory name survives */
  bdf[sizeof bdf - 1] = '\0';
  memset(out, 0, sizeof *out);
  memcpy(out->bdf, bdf, sizeof bdf);
  out->minor = -1;
  if (!buf) return -1;
  const char *p = buf, *end = buf + len, *l;
  size_t n;
  while (next_line(&p, end, &l, &n)) {
    const char *colon = memchr(l, ':', n);
    if (!colon) continue;
    const char *k = l, *v = colon + 1;
    size_t kn = (size_t)(colon - l), vn = n - kn - 1;
    trim(&k, &kn);
    trim(&v, &vn);
    if (kn == 5 && !memcmp(k, "Model", 5)) copy_n(out->model, sizeof out->model, v, vn);
    else if (kn == 8 && !memcmp(k, "GPU UUID", 8)) copy_n(out->uuid, sizeof out->uuid, v, vn);
    else if (kn == 12 && !memcmp(k, "Bus Location", 12)) copy_n(out->bus, sizeof out->bus, v, vn);
    else if (kn == 12 && !memcmp(k, "Device Minor", 12)) {
      int m = 0, d = 0;
      for (size_t i = 0; i < vn && d < 6; i++, d++) {
        if (v[i] < '0' || v[i] > '9') {
          d = 0;
          break;
        }
        m = m * 10 + (v[i] - '0');
      }
      out->minor = d ? m : -1;
    }
  }
  return out->model[0] || out->uuid[0] ? 0 : -1;
}

/* ----------------------------------------------------------------- cgroup --- */

const char *gc_probe_parse_cgroup(const char *buf, size_t len) {
  if (!buf || !len) return NULL;
  /* Kubernetes first: its pods run under docker or containerd too. Service
   * units of the daemons themselves (docker.service) do not count. */
  if (has(buf, len, "kubepods")) return "kubernetes";
  if (has(buf, len, "/docker/") || has(buf, len, "docker-")) return "docker";
  if (has(buf, len, "libpod") || has(buf, len, "/podman")) return "podman";
  if (has(buf, len, "cri-containerd") || has(buf, len, "/containerd/")) return "containerd";
  if (has(buf, len, "/lxc/") || has(buf, len, "lxc.payload")) return "lxc";
  return NULL;
}

/* ------------------------------------------------------------- ld.so.conf --- */

void gc_probe_parse_ld_conf(const char *buf, size_t len, gc_ldconf_fn fn, void *ctx) {
  if (!buf || !fn) return;
  const char *p = buf, *end = buf + len, *l;
  size_t n;
  while (next_line(&p, end, &l, &n)) {
    const char *hash = memchr(l, '#', n);
    if (hash) n = (size_t)(hash - l);
    trim(&l, &n);
    if (!n) continue;
    int include = 0;
    if (n > 7 && !memcmp(l, "include", 7) && is_blank(l[7])) include = 1, l += 8, n -= 8;
    else if (n > 5 && !memcmp(l, "hwcap", 5) && is_blank(l[5])) continue;
    /* Words separated by blanks (and, for directories, the old ',' and ':'). */
    size_t i = 0;
    while (i < n) {
      while (i < n && (is_blank(l[i]) || (!include && (l[i] == ',' || l[i] == ':')))) i++;
      size_t j = i;
      while (j < n && !is_blank(l[j]) && (include || (l[j] != ',' && l[j] != ':'))) j++;
      if (j > i) {
        char word[256];
        size_t wn = j - i;
        if (!include) {
          const char *eq = memchr(l + i, '=', wn);
          if (eq) wn = (size_t)(eq - (l + i));
          while (wn > 1 && l[i + wn - 1] == '/') wn--;
        }
        if (wn && wn < sizeof word) {
          copy_n(word, sizeof word, l + i, wn);
          if (word[0]) fn(ctx, include, word);
        }
      }
      i = j;
    }
  }
}

/* ------------------------------------------------------- CUDA_VISIBLE_DEVICES --- */

static void cvd_invalid(gc_cvd *o, int index, const char *item, size_t n, const char *why) {
  o->truncated_at = index;
  copy_n(o->invalid, sizeof o->invalid, item, n);
  snprintf(o->why, sizeof o->why, "%s", why);
}

void gc_probe_cvd(const char *value, int n_phys, const char *const *uuids, gc_cvd *out) {
  memset(out, 0, sizeof *out);
  out->truncated_at = -1;
  out->visible = n_phys;
  if (!value) return;
  out->set = 1;
  size_t len = strlen(value);
  const char *v = value;
  trim(&v, &len);
  if (!len) {
    out->empty = 1;
    out->visible = 0;
    return;
  }
  int seen[GC_PROBE_MAX_GPUS];
  int n_seen = 0, index = 0, stop = 0;
  size_t i = 0;
  while (i <= len && !stop) {
    size_t j = i;
    while (j < len && v[j] != ',') j++;
    const char *item = v + i;
    size_t n = j - i;
    trim(&item, &n);
    out->n_items++;
    int phys = -1; /* the physical GPU named, -1 unknown */
    if (!n) {
      cvd_invalid(out, index, item, n, "an empty item");
      stop = 1;
    } else if (isdigit((unsigned char)item[0])) {
      long ord = 0;
      size_t k = 0;
      while (k < n && isdigit((unsigned char)item[k]) && ord < 100000) ord = ord * 10 + (item[k++] - '0');
      if (k != n) cvd_invalid(out, index, item, n, "not a number or a GPU-/MIG- UUID"), stop = 1;
      else if (n_phys >= 0 && ord >= n_phys) {
        char why[96];
        snprintf(why, sizeof why, "ordinal %ld is out of range: there %s %d GPU%s", ord, n_phys == 1 ? "is" : "are", n_phys,
                 n_phys == 1 ? "" : "s");
        cvd_invalid(out, index, item, n, why);
        stop = 1;
      } else {
        phys = (int)ord;
      }
    } else if (n > 4 && !strncasecmp(item, "GPU-", 4)) {
      if (uuids && n_phys >= 0) {
        int match = -1, count = 0;
        for (int g = 0; g < n_phys; g++)
          if (uuids[g] && strlen(uuids[g]) >= n && !strncasecmp(uuids[g], item, n)) match = g, count++;
        if (count == 0) cvd_invalid(out, index, item, n, "no GPU has this UUID"), stop = 1;
        else if (count > 1) cvd_invalid(out, index, item, n, "this UUID prefix names several GPUs"), stop = 1;
        else phys = match;
      }
    } else if (n > 4 && !strncasecmp(item, "MIG-", 4)) {
      out->mig = 1; /* a MIG instance: valid only with MIG enabled, not checkable from files */
    } else {
      cvd_invalid(out, index, item, n, n == 2 && !memcmp(item, "-1", 2) ? "-1 is the common way to hide every GPU"
                                                                        : "not a number or a GPU-/MIG- UUID");
      stop = 1;
    }
    if (!stop && phys >= 0) {
      for (int s = 0; s < n_seen; s++)
        if (seen[s] == phys) {
          cvd_invalid(out, index, item, n, "this GPU is already listed");
          stop = 1;
        }
      if (!stop && n_seen < GC_PROBE_MAX_GPUS) seen[n_seen++] = phys;
    }
    if (!stop) out->n_valid++;
    index++;
    i = j + 1;
  }
  out->visible = n_phys < 0 && !out->n_valid ? 0 : out->n_valid;
  if (n_phys < 0 && out->n_valid) out->visible = -1; /* ordinals might not exist */
}

/* ----------------------------------------------------- NVIDIA_VISIBLE_DEVICES --- */

gc_nvd gc_probe_nvd(const char *value) {
  if (!value) return GC_NVD_UNSET;
  size_t n = strlen(value);
  const char *v = value;
  trim(&v, &n);
  if (!n) return GC_NVD_EMPTY;
  if (n == 4 && !strncasecmp(v, "void", 4)) return GC_NVD_VOID;
  if (n == 4 && !strncasecmp(v, "none", 4)) return GC_NVD_NONE;
  if (n == 3 && !strncasecmp(v, "all", 3)) return GC_NVD_ALL;
  return GC_NVD_LIST;
}

const char *gc_probe_nvd_name(gc_nvd k) {
  switch (k) {
  case GC_NVD_UNSET: return "unset";
  case GC_NVD_EMPTY: return "empty";
  case GC_NVD_VOID: return "void";
  case GC_NVD_NONE: return "none";
  case GC_NVD_ALL: return "all";
  case GC_NVD_LIST: return "list";
  }
  return "unknown";
}
