/* The compiler sweeps of `make test-toolchains` (tests/README.md):
 *
 *  NVRTC: every NVRTC given (the PyPI 11.8 and 12.x in .tools/, the system's)
 *    compiles every kernel source embedded in the library (with the embedded
 *    headers, as runtime/load.c does) for every SM it reports
 *    (nvrtcGetSupportedArchs), straight to a cubin, through Ember's own loader
 *    (runtime/nvrtc.c: em_nvrtc_open_file, as an $EMBER_NVRTC entry) and the
 *    same compile call the runtime's step 4 makes (build-tools/nvrtc_module.c,
 *    shared with the build's NVRTC cubins). The cubin reader then checks each
 *    result: its SM, the CUDA version that made it, and its kernels, which must
 *    be exactly the module's kernel list in the image table. The result is an
 *    NVRTC version x SM table; against the committed one (--table) a cell that
 *    was ok and now fails, or that the NVRTC no longer offers, is a regression
 *    and fails the sweep; a version or an SM the table lacks is only reported.
 *    An NVRTC file that exists but that Ember's loader refuses fails the sweep
 *    (an absent one is skipped). --write writes the table.
 *
 *  ptxas: every ptxas given assembles every committed PTX file (ptx/, *.ptx) of the --modules for
 *    every target its .target allows (ptxas --help: ".target sm_XY can be
 *    compiled to all GPU targets sm_MN, sm_MNa, sm_MNf where MN >= XY") and the
 *    tool lists, when the tool reads the file's PTX ISA (the ISA its toolkit
 *    emits, arch_table). The cubin must be for that SM ('a' targets marked
 *    'a') and define exactly the file's .entry kernels. Any failure fails.
 *
 * A toolchain that is absent is skipped with one line saying so. Compiles run
 * in forked children, --jobs at a time.
 *
 * usage: sweep --lib LIBEMBER.so [--nvrtc PATH]... [--nvrtc-system] [--ptxas PATH]...
 *              [--ptx-dir DIR] [--table FILE] [--write FILE] [--commit TEXT] [--jobs N] */
#include <dirent.h>
#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "arch_table.h"
#include "cubin.h"
#include "ember.h"
#include "error.h"
#include "nvrtc.h"
#include "nvrtc_module.h"
#include "ptx_header.h"

extern char **environ;

#define MAX_MODULES 32
#define MAX_HEADERS 8
#define MAX_NVRTC 8
#define MAX_PTXAS 4
#define MAX_PTX 64
#define MAX_TARGETS 64
#define MAX_JOBS 8192
#define REASON_CAP 480
#define KLIST_CAP 8192

/* ------------------------------------------------------------------ input --- */

typedef struct module {
  char name[64];
  const char *source;
  const char *kernels; /* the image table's kernel list of the module */
} module;

static module g_mod[MAX_MODULES];
static int g_nmod;
static const char *g_hdr[MAX_HEADERS], *g_hdr_name[MAX_HEADERS];
static int g_nhdr;

typedef struct nvrtc_tool {
  em_nvrtc_lib lib;
  char where[512]; /* what was asked for: a path, or "system" */
} nvrtc_tool;

static nvrtc_tool g_nv[MAX_NVRTC];
static int g_nnv;
/* NVRTC files that exist but that Ember's loader did not load: a loader
 * regression, or a broken install; either way step 4 lost a compiler. */
static int g_nv_refused;
static em_nvrtc_set g_system; /* kept loaded: the tools point into it */

typedef struct target {
  int sm;
  char variant; /* 0, 'a', 'f' */
} target;

typedef struct ptxas_tool {
  char path[512];
  char version[32]; /* "11.8.89" */
  int cuda;         /* 11080 */
  int max_isa;      /* the PTX ISA its toolkit emits: the newest it reads */
  target t[MAX_TARGETS];
  int nt;
} ptxas_tool;

static ptxas_tool g_px[MAX_PTXAS];
static int g_npx;

typedef struct ptx_file {
  char path[512];
  em_ptx_info info;
  char kernels[KLIST_CAP];
} ptx_file;

static ptx_file g_ptx[MAX_PTX];
static int g_nptx;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("toolchains: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(2);
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("toolchains: ", stdout);
  vfprintf(stdout, fmt, ap);
  fputc('\n', stdout);
  va_end(ap);
  fflush(stdout);
}

/* The file's text (NULL when it cannot be read); out of memory ends the run. */
static char *read_text(const char *path, size_t *size) {
  char *text = nm_read_file(path, size);
  if (!text && errno == ENOMEM) die("out of memory reading %s", path);
  return text;
}

/* --modules: the kernel modules the NVRTCs compile (NULL: all). Every module
 * for every SM of three NVRTCs costs about an hour of CPU with the engine's
 * fourteen modules; which SMs an NVRTC offers and compiles shows as well on
 * a few, and the build compiles every module with NVRTC 11.8 and 12.9 for
 * the SMs it embeds cubins for. */
static const char *g_only_modules;

static int module_wanted(const char *name) {
  if (!g_only_modules) return 1;
  size_t n = strlen(name);
  for (const char *p = g_only_modules; *p;) {
    size_t len = strcspn(p, ",");
    if (len == n && !strncmp(p, name, n)) return 1;
    p += len + (p[len] == ',');
  }
  return 0;
}

/* The kernel sources, headers and kernel lists of the library's image table. */
static void load_table(const char *lib) {
  em_image_table *t;
  if (em_image_table_open(lib, &t)) die("%s", em_last_error());
  for (size_t i = 0; i < em_image_table_count(t); i++) {
    em_image_info img;
    if (em_image_table_get(t, i, &img)) die("%s", em_last_error());
    if (img.kind == EM_IMAGE_SOURCE && g_nmod < MAX_MODULES && module_wanted(img.module)) {
      module *m = &g_mod[g_nmod++];
      snprintf(m->name, sizeof m->name, "%s", img.module);
      if (em_image_read(&img, (void **)&m->source)) die("%s", em_last_error()); /* NUL-terminated, kept */
      m->kernels = img.kernels;
    } else if (img.kind == EM_IMAGE_HEADER && g_nhdr < MAX_HEADERS) {
      if (em_image_read(&img, (void **)&g_hdr[g_nhdr])) die("%s", em_last_error());
      g_hdr_name[g_nhdr++] = img.module;
    }
  }
  /* The table stays open: the strings point into it. */
  if (!g_nmod) die("%s embeds no kernel sources", lib);
}

static int have_nvrtc_version(int version) {
  for (int i = 0; i < g_nnv; i++)
    if (g_nv[i].lib.version == version) return 1;
  return 0;
}

static void v_str(int v, char *buf, size_t cap) { snprintf(buf, cap, "%d.%d", v / 1000, (v % 1000) / 10); }

/* One NVRTC library through Ember's loader, as an $EMBER_NVRTC entry. */
static void add_nvrtc(const char *path) {
  if (!path[0]) return;
  if (access(path, R_OK) != 0) {
    note("skip NVRTC %s: not installed (bash build-tools/pypi_tools.sh installs it)", path);
    return;
  }
  if (g_nnv == MAX_NVRTC) die("too many --nvrtc");
  em_nvrtc_lib lib;
  if (em_nvrtc_open_file(path, &lib)) {
    /* Not a skip: the file is there, so Ember's loader is what failed (or the
     * install is broken); either way the sweep no longer covers this NVRTC. */
    note("FAIL: NVRTC %s: the file exists but Ember's loader did not load it (%s)", path, em_last_error());
    g_nv_refused++;
    return;
  }
  if (have_nvrtc_version(lib.version)) {
    note("skip NVRTC %s: its version is already in the sweep", path);
    return;
  }
  g_nv[g_nnv].lib = lib;
  snprintf(g_nv[g_nnv++].where, sizeof g_nv[0].where, "%s", path);
}

/* Whatever Ember's loader finds on this system by itself (no EMBER_NVRTC). */
static void add_nvrtc_system(void) {
  em_nvrtc_set *set = &g_system;
  unsetenv("EMBER_NVRTC");
  em_nvrtc_load_all(set);
  int added = 0;
  for (size_t i = 0; i < set->n && g_nnv < MAX_NVRTC; i++) {
    if (have_nvrtc_version(set->libs[i].version)) continue;
    g_nv[g_nnv].lib = set->libs[i];
    snprintf(g_nv[g_nnv++].where, sizeof g_nv[0].where, "system: %s", set->libs[i].path);
    added++;
  }
  if (!set->n) note("skip system NVRTC: none found (%s)", set->tried);
  else if (!added) note("system NVRTC: nothing new beyond the libraries given");
}

/* Runs argv with stdout and stderr into `log` (a file path); the exit status
 * (-1 when it could not run). */
static int run_to_log(char *const argv[], const char *log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc) return -1;
  int ws;
  while (waitpid(pid, &ws, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

static char g_tmp[256]; /* scratch folder */

static int target_cmp(const void *a, const void *b) {
  const target *x = a, *y = b;
  if (x->sm != y->sm) return x->sm - y->sm;
  return x->variant - y->variant;
}

/* A ptxas: its version (--version) and the SM targets its --help lists. */
static void add_ptxas(const char *path) {
  if (!path[0]) {
    note("skip ptxas: none given (no ptxas found, or PTXAS is empty)");
    return;
  }
  if (access(path, X_OK) != 0) {
    note("skip ptxas %s: not installed (bash build-tools/pypi_tools.sh installs ptxas 11.8)", path);
    return;
  }
  if (g_npx == MAX_PTXAS) die("too many --ptxas");
  ptxas_tool *p = &g_px[g_npx];
  memset(p, 0, sizeof *p);
  snprintf(p->path, sizeof p->path, "%s", path);
  char log[400];
  snprintf(log, sizeof log, "%s/ptxas.txt", g_tmp);
  char *ver_argv[] = {p->path, "--version", NULL};
  if (run_to_log(ver_argv, log) != 0) die("%s --version failed", path);
  char *text = read_text(log, NULL);
  const char *v = text ? strstr(text, ", V") : NULL;
  int major = 0, minor = 0;
  if (!v || sscanf(v + 3, "%d.%d", &major, &minor) != 2) die("%s --version: no version in its output", path);
  snprintf(p->version, sizeof p->version, "%.*s", (int)strcspn(v + 3, " \n"), v + 3);
  free(text);
  p->cuda = major * 1000 + minor * 10;
  p->max_isa = em_toolkit_ptx_isa(p->cuda);
  if (!p->max_isa) die("ptxas %s: arch_table knows no PTX ISA for CUDA %d.%d", p->version, major, minor);
  char *help_argv[] = {p->path, "--help", NULL};
  if (run_to_log(help_argv, log) != 0) die("%s --help failed", path);
  text = read_text(log, NULL);
  for (const char *s = text; s && (s = strstr(s, "'sm_")) != NULL; s += 4) {
    int sm = 0, n = 0;
    if (sscanf(s + 4, "%d%n", &sm, &n) != 1) continue;
    char var = s[4 + n] == 'a' || s[4 + n] == 'f' ? s[4 + n] : 0;
    if (s[4 + n + (var ? 1 : 0)] != '\'') continue;
    int dup = 0;
    for (int i = 0; i < p->nt; i++) dup |= p->t[i].sm == sm && p->t[i].variant == var;
    if (!dup && p->nt < MAX_TARGETS) p->t[p->nt++] = (target){sm, var};
  }
  free(text);
  if (!p->nt) die("%s --help lists no sm_ targets", path);
  qsort(p->t, (size_t)p->nt, sizeof p->t[0], target_cmp);
  g_npx++;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void load_ptx_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) die("cannot open %s: %s", dir, strerror(errno));
  char *names[MAX_PTX];
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    size_t len = strlen(e->d_name);
    if (len <= 4 || strcmp(e->d_name + len - 4, ".ptx") || n >= MAX_PTX) continue;
    /* The same --modules as the NVRTCs: every ptxas assembling the fourteen
     * modules' PTX for every target it lists took longer than the rest of
     * make test (binary.cu alone is 10-15 s of ptxas a target). The build
     * assembles every module's legacy PTX, and check-ptx every module's for
     * sm_75 and sm_90. */
    char module[64];
    snprintf(module, sizeof module, "%.*s", (int)strcspn(e->d_name, "."), e->d_name);
    if (module_wanted(module)) names[n++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof names[0], name_cmp);
  for (int i = 0; i < n; i++) {
    ptx_file *f = &g_ptx[g_nptx++];
    snprintf(f->path, sizeof f->path, "%s/%s", dir, names[i]);
    size_t size;
    char *text = read_text(f->path, &size);
    if (!text) die("cannot read %s", f->path);
    if (em_ptx_read_header(text, size, &f->info, f->kernels, sizeof f->kernels)) die("%s", em_last_error());
    free(text);
    free(names[i]);
  }
}

/* ------------------------------------------------------------------- jobs --- */

enum { JOB_NVRTC, JOB_PTXAS };
enum { PENDING, OK, FAILED };

typedef struct job {
  int kind, tool, item; /* tool: g_nv / g_px index; item: module / PTX file */
  target t;
  int state;
  char reason[REASON_CAP];
} job;

static job g_job[MAX_JOBS];
static int g_njob;

static job *new_job(int kind, int tool, int item, target t) {
  if (g_njob == MAX_JOBS) die("more than %d compiles", MAX_JOBS);
  job *j = &g_job[g_njob++];
  memset(j, 0, sizeof *j);
  j->kind = kind;
  j->tool = tool;
  j->item = item;
  j->t = t;
  return j;
}

static void one_line(char *s) {
  for (char *p = s; *p; p++)
    if (*p == '\n' || *p == '\r' || *p == '\t' || *p == '|') *p = ' ';
}

/* Runs in a forked child: the compile and the check; writes "OK" or the reason. */
static void run_job(const job *j, char *out, size_t cap) {
  if (j->kind == JOB_NVRTC) {
    const nvrtc_tool *nv = &g_nv[j->tool];
    const module *m = &g_mod[j->item];
    void *bin = NULL;
    size_t size = 0;
    if (nm_compile_module(&nv->lib, m->name, m->source, g_nhdr, g_hdr, g_hdr_name, j->t.sm, m->kernels, &bin, &size))
      snprintf(out, cap, "%s", em_last_error());
    else
      snprintf(out, cap, "OK");
    free(bin);
    return;
  }
  const ptxas_tool *px = &g_px[j->tool];
  const ptx_file *f = &g_ptx[j->item];
  char arch[32], cubin[400], log[400];
  snprintf(arch, sizeof arch, "-arch=sm_%d%s", j->t.sm, j->t.variant == 'a' ? "a" : j->t.variant == 'f' ? "f" : "");
  snprintf(cubin, sizeof cubin, "%s/job%d.cubin", g_tmp, (int)(j - g_job));
  snprintf(log, sizeof log, "%s/job%d.log", g_tmp, (int)(j - g_job));
  char *argv[] = {(char *)px->path, arch, (char *)f->path, "-o", cubin, NULL};
  int rc = run_to_log(argv, log);
  char *msg = read_text(log, NULL);
  if (rc != 0) {
    snprintf(out, cap, "ptxas %s exit %d: %.300s", arch, rc, msg ? msg : "");
  } else {
    size_t size;
    char *bin = read_text(cubin, &size);
    char why[REASON_CAP];
    if (!bin) snprintf(out, cap, "ptxas %s wrote no cubin", arch);
    else if (nm_check_cubin(bin, size, j->t.sm, j->t.variant, px->cuda, f->kernels, why, sizeof why))
      snprintf(out, cap, "%s", why);
    else snprintf(out, cap, "OK");
    free(bin);
  }
  free(msg);
  unlink(cubin);
  unlink(log);
}

/* Runs jobs [from, to), `jobs` children at a time; each child reports through a pipe. */
static void run_jobs(int from, int to, int jobs) {
  typedef struct slot {
    pid_t pid;
    int fd, job;
  } slot;
  slot slots[16];
  int busy = 0, next = from;
  if (jobs < 1) jobs = 1;
  if (jobs > 16) jobs = 16;
  while (next < to || busy) {
    while (busy < jobs && next < to) {
      int p[2];
      if (pipe(p)) die("pipe: %s", strerror(errno));
      fflush(NULL);
      pid_t pid = fork();
      if (pid < 0) die("fork: %s", strerror(errno));
      if (pid == 0) {
        close(p[0]);
        char out[REASON_CAP];
        run_job(&g_job[next], out, sizeof out);
        size_t len = strlen(out);
        ssize_t w = write(p[1], out, len);
        _exit(w == (ssize_t)len ? 0 : 3);
      }
      close(p[1]);
      slots[busy++] = (slot){pid, p[0], next++};
    }
    int ws;
    pid_t pid = waitpid(-1, &ws, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      die("waitpid: %s", strerror(errno));
    }
    for (int s = 0; s < busy; s++) {
      if (slots[s].pid != pid) continue;
      job *j = &g_job[slots[s].job];
      char buf[REASON_CAP];
      ssize_t n = read(slots[s].fd, buf, sizeof buf - 1);
      close(slots[s].fd);
      buf[n > 0 ? n : 0] = '\0';
      if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        j->state = FAILED;
        snprintf(j->reason, sizeof j->reason, "the compile crashed (%s %d)%s%s",
                 WIFSIGNALED(ws) ? "signal" : "exit", WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws),
                 buf[0] ? ": " : "", buf);
      } else if (!strcmp(buf, "OK")) {
        j->state = OK;
      } else {
        j->state = FAILED;
        snprintf(j->reason, sizeof j->reason, "%s", buf);
      }
      one_line(j->reason);
      slots[s] = slots[--busy];
      break;
    }
  }
}

/* ---------------------------------------------------------------- results --- */

/* The NVRTC table: rows are g_nv, columns the union of their SMs. */
static int g_cols[MAX_TARGETS], g_ncols;

typedef struct cell {
  int offered, ok;
  const char *reason; /* first failure */
} cell;

static cell nv_cell(int tool, int sm) {
  cell c = {0, 1, NULL};
  for (int i = 0; i < g_njob; i++) {
    const job *j = &g_job[i];
    if (j->kind != JOB_NVRTC || j->tool != tool || j->t.sm != sm) continue;
    c.offered = 1;
    if (j->state != OK) {
      if (c.ok) c.reason = j->reason;
      c.ok = 0;
    }
  }
  if (!c.offered) c.ok = 0;
  return c;
}

static void nv_label(int tool, char *buf, size_t cap) { v_str(g_nv[tool].lib.version, buf, cap); }

/* Where a library came from, for the table: a pip package with its version
 * (the <name>-<version>.dist-info beside the nvidia/ folder it sits in), or
 * the file the dynamic loader opened. */
static void nv_origin(const nvrtc_tool *t, char *out, size_t cap) {
  const char *path = t->lib.path, *cut = strstr(path, "/nvidia/");
  const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  if (cut) {
    char root[512];
    snprintf(root, sizeof root, "%.*s", (int)(cut - path), path);
    DIR *d = opendir(root);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
      size_t n = strlen(e->d_name);
      if (n < 11 || strcmp(e->d_name + n - 10, ".dist-info")) continue;
      char pkg[256];
      snprintf(pkg, sizeof pkg, "%.*s", (int)(n - 10), e->d_name);
      char *dash = strchr(pkg, '-');
      if (dash) *dash = ' ';
      for (char *p = pkg; *p; p++)
        if (*p == '_') *p = '-';
      snprintf(out, cap, "PyPI %s, %s", pkg, base);
      closedir(d);
      return;
    }
    if (d) closedir(d);
  }
  struct link_map *lm = NULL;
  if (t->lib.handle && dlinfo(t->lib.handle, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
    snprintf(out, cap, "%s%s", strncmp(t->where, "system", 6) ? "" : "system, ", lm->l_name);
  else
    snprintf(out, cap, "%s", path);
}

/* The committed table: per row "NVRTC x.y", per column sm_N: 'o' ok, 'F' failed, '-' not offered. */
typedef struct old_table {
  int present;
  char rows[MAX_NVRTC * 2][16];
  int nrows;
  int cols[MAX_TARGETS];
  int ncols;
  char mark[MAX_NVRTC * 2][MAX_TARGETS];
} old_table;

static void trim(char *s) {
  size_t n = strlen(s);
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\n')) s[--n] = '\0';
  size_t k = strspn(s, " ");
  memmove(s, s + k, strlen(s + k) + 1);
}

static void read_old_table(const char *path, old_table *t) {
  memset(t, 0, sizeof *t);
  char *text = read_text(path, NULL);
  if (!text) return;
  t->present = 1;
  int in_table = 0;
  for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    if (!strncmp(line, "| NVRTC |", 9)) {
      in_table = 1;
      char *p = line + 9;
      for (char *s2 = NULL, *c = strtok_r(p, "|", &s2); c; c = strtok_r(NULL, "|", &s2)) {
        trim(c);
        int sm;
        if (sscanf(c, "sm_%d", &sm) == 1 && t->ncols < MAX_TARGETS) t->cols[t->ncols++] = sm;
        else if (t->ncols < MAX_TARGETS) t->cols[t->ncols++] = -1; /* a column that is no SM (the library) */
      }
      continue;
    }
    if (!in_table || line[0] != '|') {
      if (in_table && line[0] != '|') in_table = 0;
      continue;
    }
    char first[64];
    if (sscanf(line, "| %63[0-9.] |", first) != 1 || t->nrows == MAX_NVRTC * 2) continue;
    int r = t->nrows++;
    snprintf(t->rows[r], sizeof t->rows[r], "%s", first);
    char *p = strchr(line + 1, '|') + 1; /* past the version cell */
    int col = 0;
    for (char *s2 = NULL, *c = strtok_r(p, "|", &s2); c && col < t->ncols; c = strtok_r(NULL, "|", &s2), col++) {
      trim(c);
      t->mark[r][col] = !strcmp(c, "ok") ? 'o' : !strncmp(c, "FAIL", 4) ? 'F' : '-';
    }
  }
  free(text);
}

static char old_mark(const old_table *t, const char *row, int sm) {
  for (int r = 0; r < t->nrows; r++) {
    if (strcmp(t->rows[r], row)) continue;
    for (int c = 0; c < t->ncols; c++)
      if (t->cols[c] == sm) return t->mark[r][c] ? t->mark[r][c] : '?';
    return '?'; /* row known, SM column not */
  }
  return 0; /* row unknown */
}

static int compare_with_table(const char *path) {
  old_table t;
  read_old_table(path, &t);
  if (!t.present) {
    note("no committed table %s: nothing to compare (make nvrtc-table writes it)", path);
    return 0;
  }
  int regressions = 0, news = 0, better = 0;
  for (int i = 0; i < g_nnv; i++) {
    char row[16];
    nv_label(i, row, sizeof row);
    if (!old_mark(&t, row, 0)) { /* a version the table lacks: one line for the row */
      int n = 0, ok = 0;
      for (int c = 0; c < g_ncols; c++) {
        cell cl = nv_cell(i, g_cols[c]);
        n += cl.offered;
        ok += cl.offered && cl.ok;
      }
      note("new: NVRTC %s is not in %s (%d SMs: %d ok, %d failed)", row, path, n, ok, n - ok);
      news += n;
      continue;
    }
    /* An SM that was ok and that this NVRTC no longer offers (through Ember's
     * loader, nvrtcGetSupportedArchs) lost its step-4 compiler as surely as
     * one that fails: a regression too. */
    for (int c = 0; c < t.ncols; c++) {
      if (t.cols[c] < 0 || old_mark(&t, row, t.cols[c]) != 'o' || nv_cell(i, t.cols[c]).offered) continue;
      note("REGRESSION: NVRTC %s sm_%d was ok in %s, now not offered (nvrtcGetSupportedArchs through Ember's loader)",
           row, t.cols[c], path);
      regressions++;
    }
    for (int c = 0; c < g_ncols; c++) {
      cell cl = nv_cell(i, g_cols[c]);
      if (!cl.offered) continue;
      char m = old_mark(&t, row, g_cols[c]);
      if (m == '?' || m == '-') {
        note("new: NVRTC %s sm_%d (%s) is not in %s", row, g_cols[c], cl.ok ? "ok" : "FAIL", path);
        news++;
      } else if (m == 'o' && !cl.ok) {
        note("REGRESSION: NVRTC %s sm_%d was ok in %s, now fails: %s", row, g_cols[c], path, cl.reason);
        regressions++;
      } else if (m == 'F' && cl.ok) {
        note("fixed: NVRTC %s sm_%d failed in %s, now ok", row, g_cols[c], path);
        better++;
      }
    }
  }
  if (news || better) note("%d new and %d fixed cells: run 'make nvrtc-table' and commit %s", news, better, path);
  return regressions;
}

static const char *target_str(target t, char *buf, size_t cap) {
  snprintf(buf, cap, "sm_%d%s", t.sm, t.variant == 'a' ? "a" : t.variant == 'f' ? "f" : "");
  return buf;
}

static void write_table(const char *path, const char *commit, double nv_secs, double px_secs) {
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) die("cannot write %s: %s", tmp, strerror(errno));
  char date[32];
  time_t now = time(NULL);
  strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
  fprintf(f, "# NVRTC x SM: every embedded kernel source compiled to a cubin\n\n");
  fprintf(f, "Written by `make nvrtc-table` (tests/toolchains/sweep.c) on %s at commit %s; `make test-toolchains`\n"
             "compiles everything again and fails when a cell that is ok here fails or is no longer offered (a\n"
             "version or an SM missing here is only reported). This is step 4 of the selection policy (DESIGN.md)\n"
             "with real compilers.\n\n",
          date, commit);
  fprintf(f, "Each NVRTC compiles every module of the image table (");
  int nk = 0;
  for (int m = 0; m < g_nmod; m++) {
    int k = 1;
    for (const char *p = g_mod[m].kernels; *p; p++) k += *p == ',';
    nk += k;
    fprintf(f, "%s`%s`", m ? ", " : "", g_mod[m].name);
  }
  fprintf(f, "; %d kernels), with the embedded headers, through Ember's NVRTC loader and `em_nvrtc_compile`\n"
             "(`--gpu-architecture=sm_XY --fmad=false`, the runtime's options), for every SM its\n"
             "`nvrtcGetSupportedArchs` lists, straight to a cubin. `ok`: every module compiled, and the cubin\n"
             "reader (runtime/cubin.c) found that SM, the NVRTC's CUDA version and exactly the module's kernels.\n"
             "`–`: that NVRTC does not offer the SM. `FAIL`: see the list below the table.\n\n",
          nk);
  fprintf(f, "| NVRTC | library |");
  for (int c = 0; c < g_ncols; c++) fprintf(f, " sm_%d |", g_cols[c]);
  fprintf(f, "\n|---|---|");
  for (int c = 0; c < g_ncols; c++) fprintf(f, "---|");
  fprintf(f, "\n");
  for (int i = 0; i < g_nnv; i++) {
    char row[16];
    nv_label(i, row, sizeof row);
    char origin[600];
    nv_origin(&g_nv[i], origin, sizeof origin);
    fprintf(f, "| %s | %s |", row, origin);
    for (int c = 0; c < g_ncols; c++) {
      cell cl = nv_cell(i, g_cols[c]);
      fprintf(f, " %s |", !cl.offered ? "–" : cl.ok ? "ok" : "FAIL");
    }
    fprintf(f, "\n");
  }
  int fails = 0;
  for (int i = 0; i < g_nnv; i++)
    for (int c = 0; c < g_ncols; c++) {
      cell cl = nv_cell(i, g_cols[c]);
      if (!cl.offered || cl.ok) continue;
      char row[16];
      nv_label(i, row, sizeof row);
      if (!fails++) fprintf(f, "\nFailures:\n\n");
      fprintf(f, "- NVRTC %s, sm_%d: %s\n", row, g_cols[c], cl.reason);
    }
  if (!fails) fprintf(f, "\nNo failures.\n");

  fprintf(f, "\n## ptxas x committed PTX\n\nEvery `ptx/*.ptx` assembled for every target its `.target` allows and the ptxas lists,\n"
             "when the ptxas reads its PTX ISA; each cubin checked the same way (SM, `a` mark, CUDA version,\n"
             "exactly the file's `.entry` kernels). Any failure fails `make test-toolchains`.\n\n");
  fprintf(f, "| ptxas | PTX | ISA | targets | result |\n|---|---|---|---|---|\n");
  for (int p = 0; p < g_npx; p++)
    for (int x = 0; x < g_nptx; x++) {
      int n = 0, bad = 0;
      char first[32] = "", last[32] = "";
      for (int i = 0; i < g_njob; i++) {
        const job *j = &g_job[i];
        if (j->kind != JOB_PTXAS || j->tool != p || j->item != x) continue;
        if (!n) target_str(j->t, first, sizeof first);
        target_str(j->t, last, sizeof last);
        n++;
        bad += j->state != OK;
      }
      const char *name = strrchr(g_ptx[x].path, '/') + 1;
      if (!n)
        fprintf(f, "| %s | %s | %d.%d | – | not read: ptxas %s reads PTX ISA <= %d.%d |\n", g_px[p].version, name,
                g_ptx[x].info.isa / 10, g_ptx[x].info.isa % 10, g_px[p].version, g_px[p].max_isa / 10,
                g_px[p].max_isa % 10);
      else
        fprintf(f, "| %s | %s | %d.%d | %d (%s … %s) | %s |\n", g_px[p].version, name, g_ptx[x].info.isa / 10,
                g_ptx[x].info.isa % 10, n, first, last, bad ? "FAIL" : "ok");
    }
  fprintf(f, "\nSweep time on the machine that wrote this file (2 jobs): NVRTC %.0f s, ptxas %.0f s.\n", nv_secs,
          px_secs);
  if (fclose(f)) die("error writing %s", tmp);
  if (rename(tmp, path)) die("cannot rename %s to %s: %s", tmp, path, strerror(errno));
  note("wrote %s", path);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void remove_tmp(void) { rmdir(g_tmp); }

int main(int argc, char **argv) {
  const char *lib = NULL, *ptx_dir = "ptx", *table = NULL, *write = NULL, *commit = "unknown";
  const char *nvrtc[MAX_NVRTC], *ptxas[MAX_PTXAS];
  int n_nvrtc = 0, n_ptxas = 0, system_nvrtc = 0, jobs = 2;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--nvrtc-system")) { system_nvrtc = 1; continue; }
    if (!v) die("%s needs a value", a);
    if (!strcmp(a, "--lib")) lib = v;
    else if (!strcmp(a, "--nvrtc") && n_nvrtc < MAX_NVRTC) nvrtc[n_nvrtc++] = v;
    else if (!strcmp(a, "--ptxas") && n_ptxas < MAX_PTXAS) ptxas[n_ptxas++] = v;
    else if (!strcmp(a, "--ptx-dir")) ptx_dir = v;
    else if (!strcmp(a, "--table")) table = v;
    else if (!strcmp(a, "--write")) write = v;
    else if (!strcmp(a, "--commit")) commit = v;
    else if (!strcmp(a, "--jobs")) jobs = atoi(v);
    else if (!strcmp(a, "--modules")) g_only_modules = v;
    else die("unknown argument %s (usage in tests/toolchains/sweep.c)", a);
    i++;
  }
  if (!lib) die("--lib LIBEMBER is required");
  snprintf(g_tmp, sizeof g_tmp, "%s/ember-sweep-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(g_tmp)) die("mkdtemp: %s", strerror(errno));
  atexit(remove_tmp);

  load_table(lib);
  for (int i = 0; i < n_nvrtc; i++) add_nvrtc(nvrtc[i]);
  if (system_nvrtc) add_nvrtc_system();
  for (int i = 0; i < n_ptxas; i++) add_ptxas(ptxas[i]);
  load_ptx_dir(ptx_dir);

  /* NVRTC jobs: every supported SM (plain numbers), every module. */
  for (int i = 0; i < g_nnv; i++) {
    const em_nvrtc_lib *L = &g_nv[i].lib;
    if (!L->has_archs) {
      note("skip NVRTC %s: no nvrtcGetSupportedArchs (older than 11.2)", g_nv[i].where);
      continue;
    }
    for (size_t a = 0; a < L->n_archs; a++) {
      int sm = L->archs[a], known = 0;
      for (int c = 0; c < g_ncols; c++) known |= g_cols[c] == sm;
      if (!known && g_ncols < MAX_TARGETS) g_cols[g_ncols++] = sm;
      for (int m = 0; m < g_nmod; m++) new_job(JOB_NVRTC, i, m, (target){sm, 0});
    }
  }
  for (int a = 1; a < g_ncols; a++) /* columns in SM order */
    for (int b = a; b > 0 && g_cols[b] < g_cols[b - 1]; b--) {
      int t = g_cols[b];
      g_cols[b] = g_cols[b - 1];
      g_cols[b - 1] = t;
    }
  int first_ptxas_job = g_njob;
  /* ptxas jobs: every target the .target allows (plain .target sm_XY: every
   * sm_MN, sm_MNa, sm_MNf with MN >= XY) that the tool lists. */
  for (int p = 0; p < g_npx; p++)
    for (int x = 0; x < g_nptx; x++) {
      const ptx_file *f = &g_ptx[x];
      if (f->info.isa > g_px[p].max_isa) continue; /* reported in the summary */
      if (f->info.target_variant) {
        note("skip %s: .target sm_%d%c (only plain targets are swept)", f->path, f->info.target_sm,
             f->info.target_variant);
        continue;
      }
      for (int k = 0; k < g_px[p].nt; k++)
        if (g_px[p].t[k].sm >= f->info.target_sm) new_job(JOB_PTXAS, p, x, g_px[p].t[k]);
    }

  double t0 = now_s();
  run_jobs(0, first_ptxas_job, jobs); /* NVRTC */
  double t1 = now_s();
  run_jobs(first_ptxas_job, g_njob, jobs); /* ptxas */
  double t2 = now_s();

  /* Report. */
  int failed = 0;
  for (int i = 0; i < g_nnv; i++) {
    char row[16];
    nv_label(i, row, sizeof row);
    int cells = 0, ok = 0;
    for (int c = 0; c < g_ncols; c++) {
      cell cl = nv_cell(i, g_cols[c]);
      cells += cl.offered;
      ok += cl.offered && cl.ok;
    }
    note("NVRTC %s (%s): %d SMs x %d modules: %d SMs ok, %d failed", row, g_nv[i].where, cells, g_nmod, ok,
         cells - ok);
  }
  for (int p = 0; p < g_npx; p++) {
    int n = 0, bad = 0;
    for (int i = 0; i < g_njob; i++) {
      const job *j = &g_job[i];
      if (j->kind != JOB_PTXAS || j->tool != p) continue;
      n++;
      if (j->state != OK) {
        char ts[32];
        note("FAIL: ptxas %s %s for %s: %s", g_px[p].version, g_ptx[j->item].path, target_str(j->t, ts, sizeof ts),
             j->reason);
        bad++;
      }
    }
    int skipped = 0;
    for (int x = 0; x < g_nptx; x++) skipped += g_ptx[x].info.isa > g_px[p].max_isa;
    note("ptxas %s (%s): %d assemblies of %d PTX files, %d failed%s", g_px[p].version, g_px[p].path, n,
         g_nptx - skipped, bad, skipped ? "; files of a newer PTX ISA than it reads were left out" : "");
    failed += bad;
  }
  failed += g_nv_refused;
  if (table) failed += compare_with_table(table);
  if (write) write_table(write, commit, t1 - t0, t2 - t1);
  note("NVRTC sweep %.0f s, ptxas sweep %.0f s (%d jobs at a time): %s", t1 - t0, t2 - t1, jobs,
       failed ? "FAILED" : "ok");
  return failed ? 1 : 0;
}
