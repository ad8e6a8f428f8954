/* Files of a system under a root directory (probe.h): paths, symlinks that
 * stay inside the root, the NVIDIA kernel module, the GPUs of
 * /proc/driver/nvidia/gpus, containers, device nodes and WSL. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "probe.h"

static int is_live(const char *root) { return !root || !*root || !strcmp(root, "/"); }

void gc_probe_path(const char *root, const char *path, char *out, size_t cap) {
  if (is_live(root)) {
    snprintf(out, cap, "%s", path);
    return;
  }
  size_t rn = strlen(root);
  while (rn > 1 && root[rn - 1] == '/') rn--;
  snprintf(out, cap, "%.*s%s%s", (int)rn, root, path[0] == '/' ? "" : "/", path);
}

long gc_probe_read(const char *root, const char *path, char *buf, size_t cap) {
  char full[GC_PROBE_PATH];
  if (!cap) return -1;
  buf[0] = '\0';
  gc_probe_path(root, path, full, sizeof full);
  int fd = open(full, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return -1;
  struct stat st;
  /* A FIFO or device under a hand-made root must not block or stream forever. */
  if (fstat(fd, &st) || !(S_ISREG(st.st_mode))) {
    close(fd);
    return -1;
  }
  size_t got = 0;
  while (got < cap - 1) {
    ssize_t r = read(fd, buf + got, cap - 1 - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  buf[got] = '\0';
  return (long)got;
}

int gc_probe_exists(const char *root, const char *path) {
  char full[GC_PROBE_PATH];
  struct stat st;
  gc_probe_path(root, path, full, sizeof full);
  return lstat(full, &st) == 0;
}

/* Appends "/comp" (n bytes) to cur; -1 on overflow. */
static int push(char *cur, size_t cap, const char *comp, size_t n) {
  size_t len = strlen(cur);
  if (len + 1 + n + 1 > cap) return -1;
  cur[len] = '/';
  memcpy(cur + len + 1, comp, n);
  cur[len + 1 + n] = '\0';
  return 0;
}

int gc_probe_resolve(const char *root, const char *path, char *out, size_t cap) {
  char cur[GC_PROBE_PATH] = "";  /* resolved so far, inside the root; "" is the root */
  char rest[2 * GC_PROBE_PATH];  /* still to walk */
  int links = 0;
  if (cap) out[0] = '\0';
  if (!path || snprintf(rest, sizeof rest, "%s", path) >= (int)sizeof rest) return -1;
  char *p = rest;
  for (;;) {
    while (*p == '/') p++;
    if (!*p) break;
    char *slash = strchr(p, '/');
    size_t n = slash ? (size_t)(slash - p) : strlen(p);
    if (n == 1 && p[0] == '.') {
      p += n;
      continue;
    }
    if (n == 2 && p[0] == '.' && p[1] == '.') {
      char *last = strrchr(cur, '/');
      if (last) *last = '\0'; /* never above the root */
      p += n;
      continue;
    }
    size_t keep = strlen(cur);
    if (push(cur, sizeof cur, p, n)) return -1;
    p += n;
    char full[GC_PROBE_PATH + 256];
    gc_probe_path(root, cur, full, sizeof full);
    struct stat st;
    if (lstat(full, &st)) return -1;
    if (!S_ISLNK(st.st_mode)) continue;
    if (++links > 40) return -1; /* the loader's ELOOP limit is similar */
    char target[GC_PROBE_PATH];
    ssize_t t = readlink(full, target, sizeof target - 1);
    if (t <= 0) return -1;
    target[t] = '\0';
    /* Walk the link target, then what was left of the path. */
    char next[2 * GC_PROBE_PATH];
    if (snprintf(next, sizeof next, "%s/%s", target, p) >= (int)sizeof next) return -1;
    memcpy(rest, next, sizeof rest);
    p = rest;
    if (target[0] == '/') cur[0] = '\0';
    else cur[keep] = '\0';
  }
  snprintf(out, cap, "%s", cur[0] ? cur : "/");
  char full[GC_PROBE_PATH + 256];
  gc_probe_path(root, out, full, sizeof full);
  struct stat st;
  if (stat(full, &st)) return -1;
  return S_ISREG(st.st_mode) ? 0 : 1;
}

/* ---------------------------------------------------------- kernel module --- */

void gc_probe_kmod(const char *root, gc_kmod *out) {
  char buf[4096];
  gc_kmod proc;
  long n_proc = gc_probe_read(root, "/proc/driver/nvidia/version", buf, sizeof buf);
  int proc_ok = n_proc >= 0 && gc_probe_parse_proc_version(buf, (size_t)n_proc, &proc) == 0;
  long n_sys = gc_probe_read(root, "/sys/module/nvidia/version", buf, sizeof buf);
  /* The sysfs file is the cleanest; /proc adds whether the module is the open one. */
  if (n_sys >= 0 && gc_probe_parse_sys_version(buf, (size_t)n_sys, out) == 0) {
    if (proc_ok) {
      out->open = proc.open;
      memcpy(out->arch, proc.arch, sizeof out->arch);
    }
    return;
  }
  if (proc_ok) {
    *out = proc;
    return;
  }
  char why[200];
  if (n_sys >= 0) snprintf(why, sizeof why, "%s", out->note);
  else if (n_proc >= 0) snprintf(why, sizeof why, "%s", proc.note);
  else snprintf(why, sizeof why, "neither /sys/module/nvidia/version nor /proc/driver/nvidia/version exists: the nvidia kernel module is not loaded");
  memset(out, 0, sizeof *out);
  out->open = -1;
  snprintf(out->note, sizeof out->note, "%s", why);
}

int gc_probe_proc_driver(const char *root) { return gc_probe_exists(root, "/proc/driver/nvidia"); }

static int by_bdf(const void *a, const void *b) {
  return strcmp(((const gc_proc_gpu *)a)->bdf, ((const gc_proc_gpu *)b)->bdf);
}

size_t gc_probe_proc_gpus(const char *root, gc_proc_gpu *out, size_t cap) {
  char dir[GC_PROBE_PATH];
  gc_probe_path(root, "/proc/driver/nvidia/gpus", dir, sizeof dir);
  DIR *d = opendir(dir);
  if (!d) return 0;
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < cap) {
    if (e->d_name[0] == '.') continue;
    char rel[GC_PROBE_PATH], buf[8192];
    snprintf(rel, sizeof rel, "/proc/driver/nvidia/gpus/%s/information", e->d_name);
    gc_proc_gpu *g = &out[n];
    memset(g, 0, sizeof *g);
    snprintf(g->bdf, sizeof g->bdf, "%s", e->d_name);
    long len = gc_probe_read(root, rel, buf, sizeof buf);
    if (len >= 0) gc_probe_parse_gpu_information(buf, (size_t)len, g);
    else g->minor = -1;
    n++;
  }
  closedir(d);
  qsort(out, n, sizeof *out, by_bdf);
  return n;
}

/* ------------------------------------------------------------- containers --- */

static void add_evidence(gc_container *c, const char *what) {
  size_t len = strlen(c->evidence);
  snprintf(c->evidence + len, sizeof c->evidence - len, "%s%s", len ? "; " : "", what);
}

static void device_nodes(const char *root, gc_container *c) {
  c->nvidiactl = gc_probe_exists(root, "/dev/nvidiactl");
  c->uvm = gc_probe_exists(root, "/dev/nvidia-uvm");
  c->dxg = gc_probe_exists(root, "/dev/dxg");
  char dir[GC_PROBE_PATH];
  gc_probe_path(root, "/dev", dir, sizeof dir);
  DIR *d = opendir(dir);
  if (!d) return;
  /* Sorted by number so the list reads naturally. */
  int nums[GC_PROBE_MAX_GPUS], n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    const char *s = e->d_name;
    if (strncmp(s, "nvidia", 6) || !s[6]) continue;
    int v = 0, ok = 1;
    for (const char *p = s + 6; *p; p++) {
      if (*p < '0' || *p > '9' || v > 100000) {
        ok = 0;
        break;
      }
      v = v * 10 + (*p - '0');
    }
    if (ok && n < GC_PROBE_MAX_GPUS) nums[n++] = v;
  }
  closedir(d);
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && nums[j - 1] > nums[j]; j--) {
      int t = nums[j];
      nums[j] = nums[j - 1];
      nums[j - 1] = t;
    }
  c->n_dev_gpus = n;
  for (int i = 0; i < n; i++) {
    size_t len = strlen(c->dev_gpus);
    snprintf(c->dev_gpus + len, sizeof c->dev_gpus - len, "%snvidia%d", i ? " " : "", nums[i]);
  }
}

static void wsl(const char *root, gc_container *c) {
  char buf[1024];
  long n = gc_probe_read(root, "/proc/version", buf, sizeof buf);
  if (n < 0) return;
  char *nl = strchr(buf, '\n');
  if (nl) *nl = '\0';
  snprintf(c->kernel, sizeof c->kernel, "%s", buf);
  /* WSL kernels say "microsoft" in their release ("...-microsoft-standard-WSL2");
   * only WSL2 has a GPU (through /dev/dxg). Older WSL2 kernels lack the WSL2
   * suffix, so /dev/dxg decides as well. */
  if (!strcasestr(buf, "microsoft")) return;
  c->wsl = strstr(buf, "WSL2") || c->dxg ? 2 : 1;
  c->wsl_lib = gc_probe_exists(root, "/usr/lib/wsl/lib/libcuda.so.1");
}

void gc_probe_container(const char *root, gc_container *c) {
  memset(c, 0, sizeof *c);
  if (gc_probe_exists(root, "/.dockerenv")) {
    c->inside = 1;
    snprintf(c->runtime, sizeof c->runtime, "docker");
    add_evidence(c, "/.dockerenv exists");
  }
  if (gc_probe_exists(root, "/run/.containerenv")) {
    c->inside = 1;
    if (!c->runtime[0]) snprintf(c->runtime, sizeof c->runtime, "podman");
    add_evidence(c, "/run/.containerenv exists");
  }
  static const char *const cgroups[] = {"/proc/1/cgroup", "/proc/self/cgroup"};
  for (size_t i = 0; i < 2; i++) {
    char buf[8192], what[96];
    long n = gc_probe_read(root, cgroups[i], buf, sizeof buf);
    const char *rt = n > 0 ? gc_probe_parse_cgroup(buf, (size_t)n) : NULL;
    if (!rt) continue;
    c->inside = 1;
    /* The cgroup path names the orchestrator (kubepods) more precisely than the marker files. */
    if (!c->runtime[0] || !strcmp(rt, "kubernetes")) snprintf(c->runtime, sizeof c->runtime, "%s", rt);
    snprintf(what, sizeof what, "%s names %s", cgroups[i], rt);
    add_evidence(c, what);
  }
  device_nodes(root, c);
  wsl(root, c);
}
