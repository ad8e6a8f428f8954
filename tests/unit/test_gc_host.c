/* Tests of `gpucheck host` (tools/gpucheck/host.c) and its readers
 * (probe*.c), on fake roots built here in a temporary directory, with the fake
 * libcuda ($FAKECUDA_LIB) standing in for the driver's device side.
 *
 * Fake roots: files under proc/, sys/, etc/, usr/ as a system has them;
 * regular files stand in for device nodes under dev/ (gpucheck only tests
 * that /dev entries exist); symlinks as the driver packages make them. The
 * forward-compat libcuda is a minimal ELF written here byte by byte (and, when
 * objcopy is present, a copy of the fake libcuda given the note with objcopy
 * --add-section), carrying the note of NVIDIA/nvidia-container-toolkit's test
 * data for libcuda.so.575.57.08.
 *
 * Expected verdicts are derived by hand from the rules in
 * shared/reference/cuda-compat.md (2.1 Table 3, 2.2 minor-version
 * compatibility, 6 error codes) and gpucheck-anchors.md (1.4 requirement
 * grammar and compat note, 3.1 version formats, 3.5 CUDA_VISIBLE_DEVICES),
 * as the comment of each test says; never from running gpucheck.
 *
 * Without $FAKECUDA_LIB the tests that need the fake are skipped; the CLI
 * tests need $EMBER_BUILD_DIR/bin/gpucheck. */
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "ember/runtime.h"
#include "gpucheck.h"
#include "probe.h"

extern char **environ;

static char base[PATH_MAX];
static int serial;
static const char *fake;   /* $FAKECUDA_LIB */
static char cli[PATH_MAX]; /* $EMBER_BUILD_DIR/bin/gpucheck, "" when absent */

/* --------------------------------------------------------------- fixtures --- */

static void mkdirs(const char *path) {
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      mkdir(tmp, 0755);
      *p = '/';
    }
  mkdir(tmp, 0755);
}

static void parent_dirs(const char *path) {
  char d[PATH_MAX];
  snprintf(d, sizeof d, "%s", path);
  char *s = strrchr(d, '/');
  if (s) *s = '\0', mkdirs(d);
}

static void put_bytes(const char *root, const char *rel, const void *data, size_t n) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  parent_dirs(path);
  FILE *f = fopen(path, "wb");
  if (!f) fail_msg("cannot write %s: %s", path, strerror(errno));
  assert_int_equal(fwrite(data, 1, n, f), n);
  fclose(f);
}

static void put(const char *root, const char *rel, const char *text) { put_bytes(root, rel, text, strlen(text)); }

static void link_to(const char *root, const char *rel, const char *target) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  parent_dirs(path);
  unlink(path);
  if (symlink(target, path)) fail_msg("symlink %s -> %s: %s", path, target, strerror(errno));
}

static void new_root(char *out) {
  snprintf(out, PATH_MAX, "%s/root%d", base, ++serial);
  mkdirs(out);
}

/* The banner of a proprietary R535 module, as gpucheck-anchors.md 3.1 quotes it. */
static void proc_version(const char *root, const char *v) {
  char text[256];
  snprintf(text, sizeof text, "NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  Sat Aug 19 01:15:15 UTC 2023\n"
                              "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n", v);
  put(root, "proc/driver/nvidia/version", text);
}

static void sys_version(const char *root, const char *v) {
  char text[64];
  snprintf(text, sizeof text, "%s\n", v);
  put(root, "sys/module/nvidia/version", text);
}

/* The UUID the fake gives physical device p (tests/fakecuda/README.md:
 * byte i is (37p + 13i + 0x5a) mod 256). */
static void fake_uuid(int p, char out[64]) {
  unsigned char b[16];
  for (int i = 0; i < 16; i++) b[i] = (unsigned char)((37 * p + 13 * i + 0x5a) % 256);
  snprintf(out, 64, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5],
           b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* A /proc/driver/nvidia/gpus entry for physical device p at the PCI address
 * the fake reports (bus p + 1). */
static void proc_gpu(const char *root, int p, const char *model) {
  char rel[128], text[512], uuid[64];
  fake_uuid(p, uuid);
  snprintf(rel, sizeof rel, "proc/driver/nvidia/gpus/0000:%02x:00.0/information", p + 1);
  snprintf(text, sizeof text,
           "Model: \t\t %s\nIRQ:   \t\t 150\nGPU UUID: \t %s\nVideo BIOS: \t 92.00.45.00.03\nBus Type: \t PCIe\n"
           "DMA Size: \t 47 bits\nDMA Mask: \t 0x7fffffffffff\nBus Location: \t 0000:%02x:00.0\nDevice Minor: \t %d\n"
           "GPU Excluded:\t No\n",
           model, uuid, p + 1, p);
  put(root, rel, text);
}

static void dev_nodes(const char *root, int n) {
  put(root, "dev/nvidiactl", "");
  put(root, "dev/nvidia-uvm", "");
  for (int i = 0; i < n; i++) {
    char rel[32];
    snprintf(rel, sizeof rel, "dev/nvidia%d", i);
    put(root, rel, "");
  }
}

/* The driver's user-mode library as packages install it. */
static void host_libcuda(const char *root, const char *version) {
  char rel[128], target[64];
  snprintf(rel, sizeof rel, "usr/lib/x86_64-linux-gnu/libcuda.so.%s", version);
  put(root, rel, "not an ELF: never loaded under --root");
  snprintf(target, sizeof target, "libcuda.so.%s", version);
  link_to(root, "usr/lib/x86_64-linux-gnu/libcuda.so.1", target);
}

/* A machine with a driver of release v, n GPUs named model, device nodes. */
static void driver_host(const char *root, const char *v, int n, const char *model) {
  sys_version(root, v);
  proc_version(root, v);
  host_libcuda(root, v);
  for (int i = 0; i < n; i++) proc_gpu(root, i, model);
  dev_nodes(root, n);
}

/* The ELF note record of the compat note: namesz, descsz, type, owner
 * "NVIDIA Corporation" padded to 4, JSON padded to 4 (ELF gABI notes;
 * cuda-elf-header.go reads exactly this). */
static size_t note_record(uint8_t *out, const char *json) {
  static const char owner[] = "NVIDIA Corporation";
  uint32_t namesz = sizeof owner, descsz = (uint32_t)strlen(json), type = 1;
  size_t o = 0;
  memcpy(out + o, &namesz, 4), o += 4;
  memcpy(out + o, &descsz, 4), o += 4;
  memcpy(out + o, &type, 4), o += 4;
  memset(out + o, 0, (namesz + 3) & ~3u);
  memcpy(out + o, owner, namesz), o += (namesz + 3) & ~3u;
  memset(out + o, 0, (descsz + 3) & ~3u);
  memcpy(out + o, json, descsz), o += (descsz + 3) & ~3u;
  return o;
}

/* A minimal ELF64 shared object: null section, the note section, .shstrtab. */
static size_t note_elf(uint8_t *buf, size_t cap, const char *json) {
  static const char shstr[] = "\0.note.cuda.fwd_compatibility\0.shstrtab";
  memset(buf, 0, cap);
  size_t note_off = sizeof(Elf64_Ehdr);
  size_t note_len = note_record(buf + note_off, json);
  size_t str_off = note_off + note_len;
  memcpy(buf + str_off, shstr, sizeof shstr);
  size_t sh_off = (str_off + sizeof shstr + 7) & ~(size_t)7;
  size_t total = sh_off + 3 * sizeof(Elf64_Shdr);
  assert_true(total <= cap);
  Elf64_Ehdr eh = {0};
  memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_DYN;
  eh.e_machine = EM_X86_64;
  eh.e_version = EV_CURRENT;
  eh.e_shoff = sh_off;
  eh.e_ehsize = sizeof(Elf64_Ehdr);
  eh.e_shentsize = sizeof(Elf64_Shdr);
  eh.e_shnum = 3;
  eh.e_shstrndx = 2;
  memcpy(buf, &eh, sizeof eh);
  Elf64_Shdr sh[3] = {{0}};
  sh[1].sh_name = 1;
  sh[1].sh_type = SHT_NOTE;
  sh[1].sh_flags = SHF_ALLOC;
  sh[1].sh_offset = note_off;
  sh[1].sh_size = note_len;
  sh[1].sh_addralign = 4;
  sh[2].sh_name = 1 + (Elf64_Word)strlen(".note.cuda.fwd_compatibility") + 1;
  sh[2].sh_type = SHT_STRTAB;
  sh[2].sh_offset = str_off;
  sh[2].sh_size = sizeof shstr;
  sh[2].sh_addralign = 1;
  memcpy(buf + sh_off, sh, sizeof sh);
  return total;
}

/* NVIDIA/nvidia-container-toolkit cuda-elf-header_test.go, libcuda.so.575.57.08. */
#define NOTE_575 "{\"Format\":1,\"CUDA Version\":\"12.9\",\"Driver\":[535,550,560,565,570,575],\"Device\":[1,2,7,8,9,10,11,12,13,14]}"

/* /usr/local/cuda-12.9/compat with libcuda.so.575.57.08 and its links, and
 * /usr/local/cuda -> cuda-12.9, as the cuda-compat-12-9 package lays it out. */
static void compat_575(const char *root) {
  uint8_t elf[1024];
  size_t n = note_elf(elf, sizeof elf, NOTE_575);
  put_bytes(root, "usr/local/cuda-12.9/compat/libcuda.so.575.57.08", elf, n);
  link_to(root, "usr/local/cuda-12.9/compat/libcuda.so.1", "libcuda.so.575.57.08");
  link_to(root, "usr/local/cuda", "cuda-12.9");
}

/* ------------------------------------------------------------ environment --- */

static const char *const managed[] = {"EMBER_LIBCUDA", "EMBER_FORCE", "EMBER_STRICT", "EMBER_LOG", "FAKECUDA_DEVICES",
                                      "FAKECUDA_DRIVER", "FAKECUDA_STUB", "FAKECUDA_FAIL", "FAKECUDA_NO_JIT", "FAKECUDA_MEM_MB",
                                      "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DISABLE_REQUIRE", "CUDA_VERSION",
                                      "LD_LIBRARY_PATH", "GPUCHECK_ROOT", "CUDA_DISABLE_PTX_JIT", "CUDA_FORCE_PTX_JIT"};

static void clean_env(void) {
  for (size_t i = 0; i < sizeof managed / sizeof *managed; i++) unsetenv(managed[i]);
  /* Every NVIDIA_REQUIRE_* of the surrounding environment too. */
  for (int again = 1; again;) {
    again = 0;
    for (char **e = environ; *e; e++)
      if (!strncmp(*e, "NVIDIA_REQUIRE_", 15)) {
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(strcspn(*e, "=")), *e);
        unsetenv(name);
        again = 1;
        break;
      }
  }
}

static int use_fake(const char *devices, const char *driver) {
  if (!fake) return 0;
  setenv("EMBER_LIBCUDA", fake, 1);
  setenv("FAKECUDA_DEVICES", devices, 1);
  setenv("FAKECUDA_DRIVER", driver, 1);
  return 1;
}

#define NEED_FAKE(devices, driver)                                                                                     \
  do {                                                                                                                  \
    if (!use_fake(devices, driver)) skip();                                                                              \
  } while (0)

/* ------------------------------------------------------------------ running --- */

static gc_report *run_host(const char *root) {
  em_shutdown(); /* the next Ember call reads EMBER_LIBCUDA and the fake's variables again */
  gc_opts o = {0};
  o.root = root;
  char *argv[] = {"host", NULL};
  gc_report *r = NULL;
  assert_int_equal(gc_cmd_host(1, argv, &o, &r), 0);
  assert_non_null(r);
  return r;
}

static const gc_check *find(const gc_report *r, const char *id) {
  for (size_t i = 0; i < r->n; i++)
    for (size_t j = 0; j < r->sections[i].n; j++)
      if (!strcmp(r->sections[i].checks[j].id, id)) return &r->sections[i].checks[j];
  return NULL;
}

static const gc_check *must(const gc_report *r, const char *id) {
  const gc_check *c = find(r, id);
  if (!c) fail_msg("no check '%s' in the report", id);
  return c;
}

static void expect(const gc_report *r, const char *id, gc_verdict v) {
  const gc_check *c = must(r, id);
  if (c->verdict != v)
    fail_msg("check %s: verdict %s, expected %s (%s | %s)", id, gc_verdict_name(c->verdict), gc_verdict_name(v), c->title,
             c->detail ? c->detail : "");
  if (v >= GC_WARN && !(c->fix && *c->fix)) fail_msg("check %s is %s but has no fix", id, gc_verdict_name(v));
}

static const char *fact_str(const gc_report *r, const char *obj, const char *key) {
  json_t *o = json_object_get(r->facts, obj);
  json_t *v = o ? json_object_get(o, key) : NULL;
  return json_is_string(v) ? json_string_value(v) : NULL;
}

static json_int_t fact_int(const gc_report *r, const char *obj, const char *key) {
  json_t *o = json_object_get(r->facts, obj);
  json_t *v = o ? json_object_get(o, key) : NULL;
  return json_is_integer(v) ? json_integer_value(v) : -1;
}

/* Runs the CLI with the current environment: exit code, and its JSON in *out. */
static int run_cli(const char *root, json_t **out) {
  int fd[2];
  assert_int_equal(pipe(fd), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(fd[1], 1);
    close(fd[0]);
    close(fd[1]);
    execl(cli, cli, "--root", root, "--json", (char *)NULL);
    _exit(127);
  }
  close(fd[1]);
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  ssize_t k;
  while ((k = read(fd[0], buf + n, cap - n - 1)) > 0) {
    n += (size_t)k;
    if (n + 1 == cap) buf = realloc(buf, cap *= 2);
  }
  close(fd[0]);
  buf[n] = '\0';
  int st;
  waitpid(pid, &st, 0);
  json_error_t e;
  *out = json_loads(buf, 0, &e);
  if (!*out) {
    char head[400];
    snprintf(head, sizeof head, "%s", buf);
    free(buf);
    fail_msg("gpucheck --json printed no JSON (%s): %s", e.text, head);
  }
  free(buf);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static json_t *cli_check(json_t *report, const char *id) {
  size_t i, j;
  json_t *s, *c;
  json_array_foreach(json_object_get(report, "sections"), i, s) json_array_foreach(json_object_get(s, "checks"), j, c)
      if (!strcmp(json_string_value(json_object_get(c, "id")), id)) return c;
  return NULL;
}

/* ------------------------------------------------------------ group setup --- */

static int setup(void **state) {
  (void)state;
  const char *t = getenv("TMPDIR");
  snprintf(base, sizeof base, "%s/gc-host-XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(base)) return -1;
  fake = getenv("FAKECUDA_LIB");
  if (fake && (!*fake || access(fake, R_OK))) fake = NULL;
  if (!fake) fprintf(stderr, "test_gc_host: FAKECUDA_LIB not set (run through build-tools/run_tests.sh): tests of the device side skipped\n");
  const char *b = getenv("EMBER_BUILD_DIR");
  if (b && *b) snprintf(cli, sizeof cli, "%s/bin/gpucheck", b);
  if (!cli[0] || access(cli, X_OK)) cli[0] = '\0';
  return 0;
}

static void rm_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st)) return;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d)))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        rm_tree(p);
      }
    if (d) closedir(d);
    rmdir(path);
  } else {
    unlink(path);
  }
}

static int teardown(void **state) {
  (void)state;
  em_shutdown();
  rm_tree(base);
  return 0;
}

static int each(void **state) {
  (void)state;
  clean_env();
  return 0;
}

/* ================================================================ parsers === */

/* The three banners of gpucheck-anchors.md 3.1. */
static void test_proc_version_formats(void **state) {
  (void)state;
  gc_kmod k;
  const char *prop = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\nGCC version:  gcc 12\n";
  assert_int_equal(gc_probe_parse_proc_version(prop, strlen(prop), &k), 0);
  assert_string_equal(k.v.text, "535.104.05");
  assert_int_equal(k.v.major, 535);
  assert_int_equal(k.v.minor, 104);
  assert_int_equal(k.v.patch, 5);
  assert_int_equal(k.open, 0);
  assert_string_equal(k.arch, "x86_64");
  assert_int_equal(k.l4t, 0);

  const char *open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  555.58.02  Release Build  "
                     "(dvs-builder@U16-I3-B03-4-3)  Tue Jun 25 01:26:03 UTC 2024\n";
  assert_int_equal(gc_probe_parse_proc_version(open, strlen(open), &k), 0);
  assert_string_equal(k.v.text, "555.58.02");
  assert_int_equal(k.open, 1);

  const char *jetson = "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  35.3.1  Release Build  (buildbrain@mobile-u64-5273)\n";
  assert_int_equal(gc_probe_parse_proc_version(jetson, strlen(jetson), &k), 0);
  assert_string_equal(k.v.text, "35.3.1");
  assert_int_equal(k.l4t, 1);
  assert_string_equal(k.arch, "aarch64");

  /* A single number (a year) and a time are not versions; nothing here is. */
  const char *bad = "NVRM version: NVIDIA UNIX Kernel Module  2023  01:15:15\n";
  assert_int_equal(gc_probe_parse_proc_version(bad, strlen(bad), &k), -1);
  assert_int_equal(k.found, 0);
  assert_non_null(strstr(k.note, "no version"));
  /* The length bounds the read: the version is cut off, so none is found. */
  assert_int_equal(gc_probe_parse_proc_version(prop, 40, &k), -1);
}

static void test_sys_version(void **state) {
  (void)state;
  gc_kmod k;
  assert_int_equal(gc_probe_parse_sys_version("550.54.15\n", 10, &k), 0);
  assert_string_equal(k.v.text, "550.54.15");
  assert_int_equal(gc_probe_parse_sys_version("garbage\n", 8, &k), -1);
  assert_int_equal(gc_probe_parse_sys_version("550\n", 4, &k), -1); /* a lone branch is no release */
}

static void test_gpu_information(void **state) {
  (void)state;
  const char *t = "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 150\nGPU UUID: \t GPU-5a677481-8e9b-a8b5-c2cf-dce9f6031d2a\n"
                  "Bus Location: \t 0000:3b:00.0\nDevice Minor: \t 3\n";
  gc_proc_gpu g = {.bdf = "0000:3b:00.0"};
  assert_int_equal(gc_probe_parse_gpu_information(t, strlen(t), &g), 0);
  assert_string_equal(g.model, "NVIDIA H100 80GB HBM3");
  assert_string_equal(g.uuid, "GPU-5a677481-8e9b-a8b5-c2cf-dce9f6031d2a");
  assert_string_equal(g.bus, "0000:3b:00.0");
  assert_string_equal(g.bdf, "0000:3b:00.0");
  assert_int_equal(g.minor, 3);
  assert_int_equal(gc_probe_parse_gpu_information("IRQ: 5\n", 7, &g), -1);
}

static void test_cgroup(void **state) {
  (void)state;
  const char *docker = "12:devices:/docker/0123abcd\n11:memory:/docker/0123abcd\n";
  const char *k8s = "0::/kubepods.slice/kubepods-besteffort.slice/cri-containerd-1234.scope\n";
  const char *podman = "0::/machine.slice/libpod-5678.scope/container\n";
  const char *v2 = "0::/\n";
  const char *daemon = "1:name=systemd:/system.slice/docker.service\n";
  assert_string_equal(gc_probe_parse_cgroup(docker, strlen(docker)), "docker");
  assert_string_equal(gc_probe_parse_cgroup(k8s, strlen(k8s)), "kubernetes");
  assert_string_equal(gc_probe_parse_cgroup(podman, strlen(podman)), "podman");
  assert_null(gc_probe_parse_cgroup(v2, strlen(v2)));
  assert_null(gc_probe_parse_cgroup(daemon, strlen(daemon)));
}

typedef struct conf_seen {
  char items[8][128];
  int n;
} conf_seen;

static void on_conf(void *ctx, int include, const char *value) {
  conf_seen *s = ctx;
  if (s->n < 8) snprintf(s->items[s->n++], 128, "%c%s", include ? 'I' : 'D', value);
}

static void test_ld_conf(void **state) {
  (void)state;
  const char *t = "# comment\ninclude /etc/ld.so.conf.d/*.conf\n\n/usr/local/cuda/lib64/  # trailing\nhwcap 0 nosegneg\n"
                  "/opt/old=libc6\n";
  conf_seen s = {0};
  gc_probe_parse_ld_conf(t, strlen(t), on_conf, &s);
  assert_int_equal(s.n, 3);
  assert_string_equal(s.items[0], "I/etc/ld.so.conf.d/*.conf");
  assert_string_equal(s.items[1], "D/usr/local/cuda/lib64");
  assert_string_equal(s.items[2], "D/opt/old");
}

static void test_soname_version(void **state) {
  (void)state;
  char v[32];
  assert_int_equal(gc_probe_soname_version("libcuda.so.550.54.15", "libcuda", v, sizeof v), 0);
  assert_string_equal(v, "550.54.15");
  assert_int_equal(gc_probe_soname_version("libcuda.so", "libcuda", v, sizeof v), -1);
  assert_string_equal(v, "");
  assert_int_equal(gc_probe_soname_version("libcudart.so.12", "libcudart", v, sizeof v), 0);
  assert_string_equal(v, "12");
  assert_int_equal(gc_probe_soname_version("libcudart.so.12.x", "libcudart", v, sizeof v), -1);
}

/* gpucheck-anchors.md 3.5: indices or UUID prefixes, the list ends at the
 * first invalid item, "" hides all. */
static void test_cvd(void **state) {
  (void)state;
  const char *uuids[2] = {"GPU-5a677481-8e9b-a8b5-c2cf-dce9f6031d2a", "GPU-7f8c99a6-b3c0-cdda-e7f4-010e1b28354f"};
  gc_cvd c;
  gc_probe_cvd(NULL, 2, uuids, &c);
  assert_int_equal(c.set, 0);
  assert_int_equal(c.visible, 2);
  gc_probe_cvd("", 2, uuids, &c);
  assert_int_equal(c.empty, 1);
  assert_int_equal(c.visible, 0);
  gc_probe_cvd("-1", 2, uuids, &c);
  assert_int_equal(c.truncated_at, 0);
  assert_int_equal(c.visible, 0);
  assert_string_equal(c.invalid, "-1");
  gc_probe_cvd("1,7,0", 2, uuids, &c);
  assert_int_equal(c.truncated_at, 1);
  assert_int_equal(c.visible, 1);
  assert_string_equal(c.invalid, "7");
  gc_probe_cvd("GPU-7f,0", 2, uuids, &c);
  assert_int_equal(c.truncated_at, -1);
  assert_int_equal(c.visible, 2);
  gc_probe_cvd("GPU-ff", 2, uuids, &c); /* no such GPU */
  assert_int_equal(c.visible, 0);
  gc_probe_cvd("0,0", 2, uuids, &c); /* the same GPU twice */
  assert_int_equal(c.truncated_at, 1);
  assert_int_equal(c.visible, 1);
  gc_probe_cvd("0,,1", 2, uuids, &c);
  assert_int_equal(c.truncated_at, 1);
  gc_probe_cvd("MIG-1234", 2, uuids, &c);
  assert_int_equal(c.mig, 1);
  assert_int_equal(c.visible, 1);
  assert_int_equal(gc_probe_nvd("void"), GC_NVD_VOID);
  assert_int_equal(gc_probe_nvd(" all "), GC_NVD_ALL);
  assert_int_equal(gc_probe_nvd("0,GPU-12"), GC_NVD_LIST);
  assert_int_equal(gc_probe_nvd(NULL), GC_NVD_UNSET);
}

static void test_fwd_note(void **state) {
  (void)state;
  gc_fwd_note n;
  assert_int_equal(gc_probe_fwd_note_json(NOTE_575, strlen(NOTE_575), &n), 0);
  assert_int_equal(n.found, 1);
  assert_int_equal(n.format, 1);
  assert_string_equal(n.cuda, "12.9");
  assert_int_equal(n.cuda_version, 12090);
  assert_int_equal(n.n_drivers, 6);
  assert_int_equal(n.drivers[5], 575);
  assert_int_equal(n.n_devices, 10);
  assert_int_equal(n.devices[9], 14);
  /* The ELF written byte by byte here. */
  uint8_t elf[1024];
  size_t sz = note_elf(elf, sizeof elf, NOTE_575);
  assert_int_equal(gc_probe_fwd_note_elf(elf, sz, &n), 0);
  assert_int_equal(n.found, 1);
  assert_int_equal(n.cuda_version, 12090);
  /* Jetson (Orin) compat: only a CUDA version (cuda-elf-header_test.go). */
  const char *orin = "{\"Format\":1,\"CUDA Version\":\"13.2\"}";
  assert_int_equal(gc_probe_fwd_note_json(orin, strlen(orin), &n), 0);
  assert_int_equal(n.has_drivers, 0);
  assert_int_equal(n.has_devices, 0);
  /* "invalid json" in the same test file. */
  assert_int_equal(gc_probe_fwd_note_json("{\"CUDA Version\":", 16, &n), -1);
  assert_int_equal(n.found, 0);
  assert_non_null(strstr(n.error, "malformed"));
  /* The note section holding another owner's note is malformed. */
  size_t plain = note_elf(elf, sizeof elf, NOTE_575);
  memcpy(elf + sizeof(Elf64_Ehdr) + 12, "NVIDIA Corporatiom", 18);
  assert_int_equal(gc_probe_fwd_note_elf(elf, plain, &n), -1);
  assert_int_equal(n.found, 0);
  /* An ELF without the section is no compat library: absent, not an error. */
  plain = note_elf(elf, sizeof elf, NOTE_575);
  uint8_t *name = memmem(elf, plain, ".note.cuda.fwd_compatibility", 28);
  assert_non_null(name);
  name[27] = 'x';
  assert_int_equal(gc_probe_fwd_note_elf(elf, plain, &n), 0);
  assert_int_equal(n.found, 0);
  assert_int_equal(gc_probe_fwd_note_elf("not an elf", 10, &n), -1);
}

/* objcopy --add-section on a real shared library (the fake libcuda). */
static void test_fwd_note_objcopy(void **state) {
  (void)state;
  if (!fake || system("objcopy --version >/dev/null 2>&1") != 0) skip();
  char root[PATH_MAX], note[PATH_MAX], out[PATH_MAX], cmd[4 * PATH_MAX];
  new_root(root);
  uint8_t rec[512];
  size_t n = note_record(rec, NOTE_575);
  put_bytes(root, "note.bin", rec, n);
  snprintf(note, sizeof note, "%s/note.bin", root);
  snprintf(out, sizeof out, "%s/libcuda.so.575.57.08", root);
  snprintf(cmd, sizeof cmd, "objcopy --add-section .note.cuda.fwd_compatibility='%s' '%s' '%s'", note, fake, out);
  assert_int_equal(system(cmd), 0);
  gc_fwd_note f;
  assert_int_equal(gc_probe_fwd_note_file(out, &f), 0);
  assert_int_equal(f.found, 1);
  assert_string_equal(f.cuda, "12.9");
  assert_int_equal(f.n_devices, 10);
  /* The fake itself has no such note. */
  assert_int_equal(gc_probe_fwd_note_file(fake, &f), 0);
  assert_int_equal(f.found, 0);
}

/* ================================================================== rules === */

static void test_rule_runtime(void **state) {
  (void)state;
  char why[400], need[32];
  /* 12.4 runtime, 11.4 driver: CUDA 11+ needs the same major (cuda-compat.md 2.2) -> 35. */
  assert_int_equal(gc_rule_runtime(12040, 1, 11040, "470.82.01", why, sizeof why, need, sizeof need), 35);
  assert_string_equal(need, "550.54.14"); /* Table 3: 12.4 GA */
  /* 11.8 runtime on 11.4 (470.82.01 >= floor 450.80.02): minor-version compatibility. */
  assert_int_equal(gc_rule_runtime(11080, 1, 11040, "470.82.01", why, sizeof why, need, sizeof need), 1);
  assert_string_equal(need, "520.61.05");
  /* Same version, or a newer driver: fine. */
  assert_int_equal(gc_rule_runtime(12040, 1, 12040, "550.54.15", why, sizeof why, need, sizeof need), 0);
  assert_int_equal(gc_rule_runtime(12040, 1, 13000, "580.65.06", why, sizeof why, need, sizeof need), 0);
  /* Before CUDA 11 the driver must be at least the runtime. */
  assert_int_equal(gc_rule_runtime(10020, 1, 10010, "418.39", why, sizeof why, need, sizeof need), 35);
  /* cuBLAS 12 (minor unknown) on a 12.0 driver above the 525.60.13 floor. */
  assert_int_equal(gc_rule_runtime(12000, 0, 12000, "525.85.12", why, sizeof why, need, sizeof need), 0);
  /* No driver version known. */
  assert_int_equal(gc_rule_runtime(12040, 1, 0, NULL, why, sizeof why, need, sizeof need), -1);
}

static void test_rule_fwd(void **state) {
  (void)state;
  gc_fwd_note n;
  char why[400];
  assert_int_equal(gc_probe_fwd_note_json(NOTE_575, strlen(NOTE_575), &n), 0);
  /* GeForce is NVML brand 5, not in [1,2,7..14]: 804. */
  assert_int_equal(gc_rule_fwd(&n, 535, 5, why, sizeof why), 804);
  assert_non_null(strstr(why, "GeForce"));
  /* Tesla (2) on branch 535: listed both. */
  assert_int_equal(gc_rule_fwd(&n, 535, 2, why, sizeof why), 0);
  /* Branch 525 is not in [535..575]: 803. */
  assert_int_equal(gc_rule_fwd(&n, 525, 2, why, sizeof why), 803);
  /* Unknown brand: undecidable. */
  assert_int_equal(gc_rule_fwd(&n, 535, -1, why, sizeof why), -1);
}

static void test_rule_lowest_cc(void **state) {
  (void)state;
  gc_version v;
  int high;
  const char *row;
  /* cuDNN 9.17.0: lowest CC 7.5 (cuda-compat.md 9.1). */
  gc_probe_parse_version("9.17.0", 6, &v);
  assert_int_equal(gc_rule_lib_lowest_cc("cudnn", &v, &high, &row), 75);
  /* cuDNN 8.9.6: 5.0. */
  gc_probe_parse_version("8.9.6", 5, &v);
  assert_int_equal(gc_rule_lib_lowest_cc("cudnn", &v, &high, &row), 50);
  /* cuDNN 8.2.2: 3.0 for the CUDA 10.2 build, 3.5 for CUDA 11. */
  gc_probe_parse_version("8.2.2", 5, &v);
  assert_int_equal(gc_rule_lib_lowest_cc("cudnn", &v, &high, &row), 30);
  assert_int_equal(high, 35);
  /* cuBLAS 12.x: 5.0; cuBLAS 13: 7.5. */
  gc_probe_parse_version("12.4.5.8", 8, &v);
  assert_int_equal(gc_rule_lib_lowest_cc("cublas", &v, &high, &row), 50);
  gc_probe_parse_version("13.1.0.3", 8, &v);
  assert_int_equal(gc_rule_lib_lowest_cc("cublas", &v, &high, &row), 75);
}

static void test_names(void **state) {
  (void)state;
  /* arch_table cc.tsv: H100 9.0, GeForce RTX 30xx 8.6, Tesla T4 7.5, A100 8.0. */
  assert_int_equal(gc_probe_cc_from_name("NVIDIA H100 80GB HBM3"), 90);
  assert_int_equal(gc_probe_cc_from_name("NVIDIA GeForce RTX 3090"), 86);
  assert_int_equal(gc_probe_cc_from_name("Tesla T4"), 75);
  assert_int_equal(gc_probe_cc_from_name("NVIDIA A100-SXM4-80GB"), 80);
  assert_int_equal(gc_probe_cc_from_name("Some Future GPU"), 0);
  assert_int_equal(gc_probe_brand_from_name("NVIDIA GeForce RTX 3090"), 5);
  assert_int_equal(gc_probe_brand_from_name("Tesla T4"), 2);
  assert_int_equal(gc_probe_brand_from_name("NVIDIA H100 80GB HBM3"), -1);
}

/* ========================================================= files and paths === */

static void test_resolve(void **state) {
  (void)state;
  char root[PATH_MAX], out[GC_PROBE_PATH];
  new_root(root);
  put(root, "usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", "x");
  link_to(root, "usr/lib/x86_64-linux-gnu/libcuda.so.1", "libcuda.so.550.54.15");
  /* An absolute link is taken inside the root, not on the host. */
  link_to(root, "lib64", "/usr/lib/x86_64-linux-gnu");
  assert_int_equal(gc_probe_resolve(root, "/lib64/libcuda.so.1", out, sizeof out), 0);
  assert_string_equal(out, "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15");
  /* ".." stops at the root. */
  link_to(root, "escape", "../../../../usr/lib/x86_64-linux-gnu/libcuda.so.1");
  assert_int_equal(gc_probe_resolve(root, "/escape", out, sizeof out), 0);
  assert_string_equal(out, "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15");
  /* A loop ends. */
  link_to(root, "a", "b");
  link_to(root, "b", "a");
  assert_int_equal(gc_probe_resolve(root, "/a", out, sizeof out), -1);
  assert_int_equal(gc_probe_resolve(root, "/usr/lib", out, sizeof out), 1);
  assert_int_equal(gc_probe_resolve(root, "/nothing", out, sizeof out), -1);
}

/* The loader's order: LD_LIBRARY_PATH, ld.so.conf and its includes (relative
 * ones from the including file's directory, sorted), then the defaults. */
static void test_loader_dirs(void **state) {
  (void)state;
  char root[PATH_MAX];
  new_root(root);
  put(root, "etc/ld.so.conf", "include ld.so.conf.d/*.conf\n/opt/first\n");
  put(root, "etc/ld.so.conf.d/b.conf", "/opt/b\n");
  put(root, "etc/ld.so.conf.d/a.conf", "/opt/a\n/usr/lib/x86_64-linux-gnu\n");
  gc_ldpath p;
  gc_probe_loader_dirs(root, "/env/one:/env/two/", &p);
  const char *want[] = {"/env/one", "/env/two", "/opt/a", "/usr/lib/x86_64-linux-gnu", "/opt/b", "/opt/first",
                        "/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"};
  assert_int_equal(p.n, sizeof want / sizeof *want);
  for (size_t i = 0; i < p.n; i++) assert_string_equal(p.dirs[i], want[i]);
  assert_string_equal(p.from[0], "LD_LIBRARY_PATH");
  assert_string_equal(p.from[2], "/etc/ld.so.conf.d/a.conf");
  assert_string_equal(p.from[6], "default");
}

static void test_libraries_scan(void **state) {
  (void)state;
  char root[PATH_MAX];
  new_root(root);
  put(root, "opt/new/libcudart.so.12.4.127", "x");
  link_to(root, "opt/new/libcudart.so.12", "libcudart.so.12.4.127");
  put(root, "usr/lib/x86_64-linux-gnu/libcudart.so.12.0.107", "x");
  link_to(root, "usr/lib/x86_64-linux-gnu/libcudart.so.12", "libcudart.so.12.0.107");
  put(root, "usr/lib/x86_64-linux-gnu/libcudnn_ops.so.9.1.0", "x");
  put(root, "usr/lib/x86_64-linux-gnu/libnvrtc-builtins.so.12.4", "x"); /* not NVRTC itself */
  gc_ldpath p;
  gc_probe_loader_dirs(root, "/opt/new", &p);
  gc_lib libs[8];
  size_t n = gc_probe_libraries(root, &p, libs, 8);
  assert_int_equal(n, 3);
  assert_string_equal(libs[0].name, "cudart");
  assert_string_equal(libs[0].version, "12.4.127");
  assert_string_equal(libs[0].path, "/opt/new/libcudart.so.12.4.127");
  assert_int_equal(libs[0].shadowed_by, -1);
  assert_string_equal(libs[1].version, "12.0.107");
  assert_int_equal(libs[1].shadowed_by, 0); /* same name and major, later on the path */
  assert_string_equal(libs[2].name, "cudnn_ops");
}

static void test_container_probe(void **state) {
  (void)state;
  char root[PATH_MAX];
  new_root(root);
  put(root, ".dockerenv", "");
  put(root, "proc/1/cgroup", "0::/kubepods/besteffort/pod1/abc\n");
  put(root, "dev/nvidiactl", "");
  put(root, "dev/nvidia1", "");
  put(root, "dev/nvidia0", "");
  put(root, "dev/nvidia-modeset", "");
  gc_container c;
  gc_probe_container(root, &c);
  assert_int_equal(c.inside, 1);
  assert_string_equal(c.runtime, "kubernetes");
  assert_int_equal(c.n_dev_gpus, 2);
  assert_string_equal(c.dev_gpus, "nvidia0 nvidia1");
  assert_int_equal(c.uvm, 0);
  assert_int_equal(c.wsl, 0);
  new_root(root);
  put(root, "proc/version", "Linux version 5.15.153.1-microsoft-standard-WSL2 (root@941d701f84f1) (gcc 11.2.0)\n");
  put(root, "dev/dxg", "");
  gc_probe_container(root, &c);
  assert_int_equal(c.wsl, 2);
  assert_int_equal(c.wsl_lib, 0);
}

/* ============================================================ host reports === */

/* No driver at all: no module, no libcuda. Both fail (cuda-compat.md 0.1
 * step 1: no libcuda -> 35), nothing else is claimed. */
static void test_host_no_driver(void **state) {
  (void)state;
  char root[PATH_MAX];
  new_root(root);
  put(root, "etc/hostname", "bare-node\n");
  gc_report *r = run_host(root);
  expect(r, "driver.module", GC_FAIL);
  expect(r, "driver.libcuda", GC_FAIL);
  assert_null(find(r, "driver.mismatch"));
  assert_string_equal(fact_str(r, "driver", "state"), "not-found");
  assert_true(json_is_null(json_object_get(json_object_get(r->facts, "driver"), "kernel_module")));
  assert_true(json_is_null(json_object_get(json_object_get(r->facts, "driver"), "libcuda_path")));
  assert_int_equal(json_array_size(json_object_get(r->facts, "gpus")), 0);
  assert_int_equal(json_array_size(json_object_get(r->facts, "libraries")), 0);
  assert_string_equal(json_string_value(json_object_get(r->facts, "hostname")), "bare-node");
  assert_int_equal(gc_report_exit_code(r), GC_EXIT_FAIL);
  gc_report_free(r);
}

/* Only the toolkit stub: a container image with .../stubs on LD_LIBRARY_PATH
 * and a libcuda.so.1 link to the stub. cuInit returns 34 (cuda-compat.md 6). */
static void test_host_stub_only(void **state) {
  (void)state;
  char root[PATH_MAX];
  new_root(root);
  proc_version(root, "535.104.05");
  put(root, ".dockerenv", "");
  put(root, "usr/local/cuda-12.4/targets/x86_64-linux/lib/stubs/libcuda.so", "stub");
  link_to(root, "usr/local/cuda-12.4/targets/x86_64-linux/lib/stubs/libcuda.so.1", "libcuda.so");
  setenv("LD_LIBRARY_PATH", "/usr/local/cuda-12.4/targets/x86_64-linux/lib/stubs", 1);
  gc_report *r = run_host(root);
  expect(r, "driver.libcuda", GC_FAIL);
  assert_non_null(strstr(must(r, "driver.libcuda")->fix, "LD_LIBRARY_PATH"));
  expect(r, "container.device_nodes", GC_FAIL);
  assert_string_equal(fact_str(r, "driver", "state"), "stub");
  assert_int_equal(fact_int(r, "driver", "cuda_error"), 34);
  assert_string_equal(fact_str(r, "driver", "libcuda_kind"), "stub");
  assert_string_equal(fact_str(r, "driver", "libcuda_path"), "/usr/local/cuda-12.4/targets/x86_64-linux/lib/stubs/libcuda.so");
  assert_string_equal(fact_str(r, "driver", "kernel_module"), "535.104.05");
  assert_int_equal(gc_report_exit_code(r), GC_EXIT_FAIL);
  gc_report_free(r);

  /* The same through the fake in stub mode: still a stub, and no GPU facts. */
  if (!fake) return;
  use_fake("8.0", "12020");
  setenv("FAKECUDA_STUB", "1", 1);
  r = run_host(root);
  assert_string_equal(fact_str(r, "driver", "state"), "stub");
  assert_int_equal(json_array_size(json_object_get(r->facts, "gpus")), 0);
  gc_report_free(r);
}

/* A CUDA 12.4 runtime on a driver for CUDA 11.4 (R470): CUDA 11+ runtimes need
 * a driver of their own major (cuda-compat.md 2.2) -> 35; an 11.8 runtime on
 * the same driver runs through minor-version compatibility (470.82.01 is above
 * the 11.x floor 450.80.02) -> warning. */
static void test_host_driver_older_than_runtime(void **state) {
  (void)state;
  char root[PATH_MAX];
  new_root(root);
  driver_host(root, "470.82.01", 1, "Tesla T4");
  put(root, "etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n");
  put(root, "etc/ld.so.conf.d/cuda.conf", "/usr/local/cuda-12.4/lib64\n/usr/local/cuda-11.8/lib64\n");
  put(root, "usr/local/cuda-12.4/lib64/libcudart.so.12.4.127", "x");
  link_to(root, "usr/local/cuda-12.4/lib64/libcudart.so.12", "libcudart.so.12.4.127");
  put(root, "usr/local/cuda-11.8/lib64/libcudart.so.11.8.89", "x");
  link_to(root, "usr/local/cuda-11.8/lib64/libcudart.so.11.0", "libcudart.so.11.8.89");
  NEED_FAKE("7.5=Tesla T4", "11040");
  gc_report *r = run_host(root);
  expect(r, "lib.cudart.12", GC_FAIL);
  assert_non_null(strstr(must(r, "lib.cudart.12")->fix, "550.54.14"));
  expect(r, "lib.cudart.11", GC_WARN);
  expect(r, "driver.mismatch", GC_OK);
  expect(r, "driver.init", GC_OK);
  expect(r, "gpu0", GC_OK);
  assert_int_equal(fact_int(r, "driver", "cuda"), 11040);
  assert_false(json_is_true(json_object_get(json_object_get(r->facts, "driver"), "cuda_estimated")));
  json_t *libs = json_object_get(r->facts, "libraries");
  assert_int_equal(json_array_size(libs), 2);
  json_t *l0 = json_array_get(libs, 0);
  assert_string_equal(json_string_value(json_object_get(l0, "name")), "cudart");
  assert_string_equal(json_string_value(json_object_get(l0, "version")), "12.4.127");
  assert_string_equal(json_string_value(json_object_get(l0, "path")), "/usr/local/cuda-12.4/lib64/libcudart.so.12.4.127");
  json_t *g0 = json_array_get(json_object_get(r->facts, "gpus"), 0);
  assert_string_equal(json_string_value(json_object_get(g0, "cc")), "7.5");
  assert_string_equal(json_string_value(json_object_get(g0, "name")), "Tesla T4");
  assert_string_equal(json_string_value(json_object_get(g0, "pci")), "0000:01:00.0");
  assert_int_equal(gc_report_exit_code(r), GC_EXIT_FAIL);
  gc_report_free(r);
}

/* Kernel module 550.54.15 with the user-mode libcuda of 560.35.03: the
 * "Driver/library version mismatch", 803 (cuda-compat.md 6, pain P7). */
static void test_host_module_library_mismatch(void **state) {
  (void)state;
  char root[PATH_MAX];
  new_root(root);
  sys_version(root, "550.54.15");
  proc_version(root, "550.54.15");
  host_libcuda(root, "560.35.03");
  proc_gpu(root, 0, "NVIDIA H100 80GB HBM3");
  dev_nodes(root, 1);
  /* Offline (no driver asked): predicted from the files alone. */
  gc_report *r = run_host(root);
  expect(r, "driver.mismatch", GC_FAIL);
  assert_non_null(strstr(must(r, "driver.mismatch")->title, "803"));
  assert_string_equal(fact_str(r, "driver", "state"), "init-failed");
  assert_int_equal(fact_int(r, "driver", "cuda_error"), 803);
  assert_string_equal(fact_str(r, "driver", "kernel_module"), "550.54.15");
  assert_string_equal(fact_str(r, "driver", "libcuda_version"), "560.35.03");
  /* GPUs from /proc, CC from the name (arch_table: H100 is 9.0). */
  json_t *g0 = json_array_get(json_object_get(r->facts, "gpus"), 0);
  assert_string_equal(json_string_value(json_object_get(g0, "cc")), "9.0");
  assert_true(json_is_true(json_object_get(g0, "cc_estimated")));
  /* CUDA estimated from branch 560 (cuda-compat.md 2.3: R560 -> 12.6). */
  assert_int_equal(fact_int(r, "driver", "cuda"), 12060);
  assert_int_equal(gc_report_exit_code(r), GC_EXIT_FAIL);
  gc_report_free(r);
  /* With the fake as the device side: the prediction stands. */
  NEED_FAKE("9.0=NVIDIA H100 80GB HBM3", "12060");
  r = run_host(root);
  expect(r, "driver.mismatch", GC_FAIL);
  assert_int_equal(fact_int(r, "driver", "cuda_error"), 803);
  assert_int_equal(gc_report_exit_code(r), GC_EXIT_FAIL);
  gc_report_free(r);
}

/* cuda-compat 12.9 (the 575.57.08 note) first on the loader path of a
 * GeForce RTX 3090 host on R535: brand 5 is not in the note's Device list ->
 * 804 (gpucheck-anchors.md P5). A Tesla T4 there is eligible; on R525 the
 * branch is not listed -> 803. */
static void test_host_compat_on_geforce(void **state) {
  (void)state;
  char root[PATH_MAX];
  new_root(root);
  driver_host(root, "535.104.05", 1, "NVIDIA GeForce RTX 3090");
  compat_575(root);
  setenv("LD_LIBRARY_PATH", "/usr/local/cuda/compat", 1);
  NEED_FAKE("8.6=NVIDIA GeForce RTX 3090", "12090");
  gc_report *r = run_host(root);
  expect(r, "driver.compat", GC_FAIL);
  json_t *d = must(r, "driver.compat")->data;
  assert_int_equal(json_integer_value(json_object_get(d, "result")), 804);
  assert_non_null(strstr(must(r, "driver.compat")->fix, "/usr/local/cuda/compat"));
  assert_string_equal(fact_str(r, "driver", "libcuda_kind"), "compat");
  assert_string_equal(fact_str(r, "driver", "libcuda_path"), "/usr/local/cuda-12.9/compat/libcuda.so.575.57.08");
  assert_string_equal(fact_str(r, "driver", "state"), "init-failed");
  assert_int_equal(fact_int(r, "driver", "cuda_error"), 804);
  assert_null(find(r, "driver.mismatch")); /* a compat copy differs from the module by design */
  assert_int_equal(gc_report_exit_code(r), GC_EXIT_FAIL);
  gc_report_free(r);

  new_root(root);
  driver_host(root, "535.104.05", 1, "Tesla T4");
  compat_575(root);
  use_fake("7.5=Tesla T4", "12090");
  r = run_host(root);
  expect(r, "driver.compat", GC_OK);
  assert_string_equal(fact_str(r, "driver", "state"), "ok");
  gc_report_free(r);
  /* An image requirement is checked on the host against the host driver's
   * CUDA (R535: 12.2, cuda-compat.md 2.3), not the compat library's 12.9:
   * that is why NVIDIA's images add brand=tesla,driver>=... escape terms. */
  setenv("NVIDIA_REQUIRE_CUDA", "cuda>=12.4", 1);
  r = run_host(root);
  expect(r, "container.require.nvidia_require_cuda", GC_FAIL);
  gc_report_free(r);
  setenv("NVIDIA_REQUIRE_CUDA", "cuda>=12.4 brand=tesla,driver>=535,driver<536", 1);
  r = run_host(root);
  expect(r, "container.require.nvidia_require_cuda", GC_OK);
  gc_report_free(r);
  unsetenv("NVIDIA_REQUIRE_CUDA");

  new_root(root);
  driver_host(root, "525.147.05", 1, "Tesla T4");
  compat_575(root);
  r = run_host(root);
  expect(r, "driver.compat", GC_FAIL);
  assert_int_equal(json_integer_value(json_object_get(must(r, "driver.compat")->data, "result")), 803);
  gc_report_free(r);

  /* Installed but not on the path: only information. */
  unsetenv("LD_LIBRARY_PATH");
  r = run_host(root);
  expect(r, "driver.compat", GC_INFO);
  assert_string_equal(fact_str(r, "driver", "libcuda_kind"), "driver");
  gc_report_free(r);
}

/* An image requiring cuda>=12.4 (or R470 Tesla/GeForce) on an R535 host with a
 * GeForce RTX 3090. libnvidia-container's grammar (gpucheck-anchors.md 1.4):
 * term 1 fails (CUDA 12.2 < 12.4), term 2 fails (brand geforce != tesla),
 * term 3 fails (driver 535.104.05 is not < 471): not met. The CUDA 12.4
 * driver is 550.54.14 (cuda-compat.md Table 3). */
static void test_host_container_requirement(void **state) {
  (void)state;
  char root[PATH_MAX];
  new_root(root);
  driver_host(root, "535.104.05", 1, "NVIDIA GeForce RTX 3090");
  put(root, ".dockerenv", "");
  const char *req = "cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=geforce,driver>=470,driver<471";
  setenv("NVIDIA_REQUIRE_CUDA", req, 1);
  setenv("NVIDIA_VISIBLE_DEVICES", "all", 1);
  NEED_FAKE("8.6=NVIDIA GeForce RTX 3090", "12020");
  gc_report *r = run_host(root);
  expect(r, "container.require.nvidia_require_cuda", GC_FAIL);
  assert_non_null(strstr(must(r, "container.require.nvidia_require_cuda")->fix, "550.54.14"));
  expect(r, "container.device_nodes", GC_OK);
  assert_string_equal(fact_str(r, "container", "require_cuda"), req);
  assert_string_equal(fact_str(r, "container", "runtime"), "docker");
  assert_true(json_is_true(json_object_get(json_object_get(r->facts, "container"), "inside")));
  assert_int_equal(gc_report_exit_code(r), GC_EXIT_FAIL);
  gc_report_free(r);

  /* NVIDIA_DISABLE_REQUIRE=true: the container starts; a warning remains. */
  setenv("NVIDIA_DISABLE_REQUIRE", "true", 1);
  r = run_host(root);
  expect(r, "container.require.nvidia_require_cuda", GC_WARN);
  expect(r, "container.disable_require", GC_WARN);
  gc_report_free(r);
  unsetenv("NVIDIA_DISABLE_REQUIRE");

  /* cuda>=12.2 holds on CUDA 12.2. A legacy image (CUDA_VERSION only) implies cuda>=12.4. */
  setenv("NVIDIA_REQUIRE_CUDA", "cuda>=12.2", 1);
  r = run_host(root);
  expect(r, "container.require.nvidia_require_cuda", GC_OK);
  gc_report_free(r);
  unsetenv("NVIDIA_REQUIRE_CUDA");
  setenv("CUDA_VERSION", "12.4.1", 1);
  r = run_host(root);
  expect(r, "container.require.cuda_version", GC_FAIL);
  assert_string_equal(fact_str(r, "container", "require_cuda"), "cuda>=12.4");
  gc_report_free(r);
}

/* CUDA_VISIBLE_DEVICES="" hides both GPUs: cuInit reports 100 (gpucheck-
 * anchors.md 3.2, 3.5). "-1" does the same; "1,7" keeps one GPU (7 ends it). */
static void test_host_cvd_hides_all(void **state) {
  (void)state;
  char root[PATH_MAX];
  new_root(root);
  driver_host(root, "550.54.15", 2, "NVIDIA A100-SXM4-80GB");
  NEED_FAKE("8.0=NVIDIA A100-SXM4-80GB,8.0=NVIDIA A100-SXM4-80GB", "12040");
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  gc_report *r = run_host(root);
  expect(r, "gpus.visible", GC_FAIL);
  assert_non_null(strstr(must(r, "gpus.visible")->title, "all 2 GPUs"));
  expect(r, "driver.init", GC_FAIL);
  assert_string_equal(fact_str(r, "driver", "state"), "no-device");
  assert_int_equal(json_array_size(json_object_get(r->facts, "gpus")), 0);
  assert_int_equal(json_integer_value(json_object_get(r->facts, "physical_gpus")), 2);
  assert_int_equal(gc_report_exit_code(r), GC_EXIT_FAIL);
  gc_report_free(r);

  setenv("CUDA_VISIBLE_DEVICES", "-1", 1);
  r = run_host(root);
  expect(r, "gpus.visible", GC_FAIL);
  gc_report_free(r);

  setenv("CUDA_VISIBLE_DEVICES", "1,7", 1);
  r = run_host(root);
  expect(r, "gpus.visible", GC_WARN);
  expect(r, "driver.init", GC_OK);
  json_t *gs = json_object_get(r->facts, "gpus");
  assert_int_equal(json_array_size(gs), 1);
  /* The visible GPU is physical 1: PCI bus 2 in the fake. */
  assert_string_equal(json_string_value(json_object_get(json_array_get(gs, 0), "pci")), "0000:02:00.0");
  gc_report_free(r);

  /* A UUID prefix of physical 1 (fake: first byte 37 + 0x5a = 0x7f). */
  setenv("CUDA_VISIBLE_DEVICES", "GPU-7f", 1);
  r = run_host(root);
  expect(r, "gpus.visible", GC_INFO);
  assert_int_equal(json_array_size(json_object_get(r->facts, "gpus")), 1);
  gc_report_free(r);
}

/* A healthy host: every check ok or info, Ember plans each GPU. */
static void test_host_healthy(void **state) {
  (void)state;
  char root[PATH_MAX];
  new_root(root);
  driver_host(root, "580.65.06", 1, "NVIDIA H100 80GB HBM3");
  NEED_FAKE("9.0=NVIDIA H100 80GB HBM3", "13000");
  gc_report *r = run_host(root);
  expect(r, "driver.module", GC_OK);
  expect(r, "driver.libcuda", GC_OK);
  expect(r, "driver.mismatch", GC_OK);
  expect(r, "container.device_nodes", GC_OK);
  const gc_check *e = must(r, "ember.gpu0");
  assert_true(e->verdict == GC_OK || e->verdict == GC_WARN);
  assert_non_null(e->detail);
  assert_string_equal(fact_str(r, "driver", "state"), "ok");
  assert_int_equal(fact_int(r, "driver", "cuda"), 13000);
  json_t *g0 = json_array_get(json_object_get(r->facts, "gpus"), 0);
  assert_int_equal(json_integer_value(json_object_get(g0, "memory_bytes")), 16384LL * 1024 * 1024); /* fake default */
  char uuid[64];
  fake_uuid(0, uuid);
  assert_string_equal(json_string_value(json_object_get(g0, "uuid")), uuid);
  gc_report_free(r);
}

/* WSL2 with a Linux driver's libcuda shadowing /usr/lib/wsl/lib. */
static void test_host_wsl(void **state) {
  (void)state;
  char root[PATH_MAX];
  new_root(root);
  put(root, "proc/version", "Linux version 5.15.153.1-microsoft-standard-WSL2 (root@x) (gcc 11.2.0)\n");
  put(root, "dev/dxg", "");
  put(root, "usr/lib/wsl/lib/libcuda.so.1.1", "x");
  link_to(root, "usr/lib/wsl/lib/libcuda.so.1", "libcuda.so.1.1");
  put(root, "etc/ld.so.conf.d/ld.wsl.conf", "/usr/lib/wsl/lib\n");
  put(root, "etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n");
  gc_report *r = run_host(root);
  expect(r, "container.wsl", GC_OK);
  expect(r, "driver.module", GC_INFO);
  expect(r, "driver.libcuda", GC_OK);
  assert_string_equal(fact_str(r, "driver", "libcuda_kind"), "wsl");
  assert_true(json_is_null(json_object_get(json_object_get(r->facts, "driver"), "libcuda_version")));
  gc_report_free(r);
  /* A Linux driver installed inside WSL, first on the path. */
  host_libcuda(root, "550.54.15");
  setenv("LD_LIBRARY_PATH", "/usr/lib/x86_64-linux-gnu", 1);
  r = run_host(root);
  expect(r, "container.wsl", GC_FAIL);
  gc_report_free(r);
}

/* Without --root and with EMBER_LIBCUDA, the libcuda reported is the one
 * Ember loaded, and the GPUs are the fake's. */
static void test_host_live_with_fake(void **state) {
  (void)state;
  NEED_FAKE("8.6=NVIDIA RTX A6000,7.5=Tesla T4", "12080");
  gc_report *r = run_host(NULL);
  char real[PATH_MAX];
  assert_non_null(realpath(fake, real));
  assert_string_equal(fact_str(r, "driver", "libcuda_path"), real);
  assert_string_equal(fact_str(r, "driver", "state"), "ok");
  assert_int_equal(fact_int(r, "driver", "cuda"), 12080);
  assert_int_equal(json_array_size(json_object_get(r->facts, "gpus")), 2);
  assert_string_equal(json_string_value(json_object_get(r->facts, "root")), "/");
  gc_report_free(r);
  /* "0,5" with two GPUs: 5 does not exist, so CUDA shows one; flagged whether
   * or not this machine has /proc/driver/nvidia/gpus to count from. */
  setenv("CUDA_VISIBLE_DEVICES", "0,5", 1);
  r = run_host(NULL);
  expect(r, "gpus.visible", GC_WARN);
  assert_int_equal(json_array_size(json_object_get(r->facts, "gpus")), 1);
  gc_report_free(r);
}

static void test_host_usage(void **state) {
  (void)state;
  gc_opts o = {0};
  gc_report *r = NULL;
  char *argv[] = {"host", "--bogus", NULL};
  assert_int_equal(gc_cmd_host(2, argv, &o, &r), GC_EXIT_USAGE);
  assert_null(r);
  char *argv1[] = {"host", NULL};
  o.root = "/nonexistent/gpucheck-root";
  assert_int_equal(gc_cmd_host(1, argv1, &o, &r), GC_EXIT_USAGE);
}

/* ==================================================================== CLI === */

/* build/bin/gpucheck --root DIR --json: exit codes and facts. */
static void test_cli(void **state) {
  (void)state;
  if (!cli[0]) skip();
  char root[PATH_MAX];
  json_t *j;
  /* No driver: exit 1, state not-found. */
  new_root(root);
  int rc = run_cli(root, &j);
  assert_int_equal(rc, 1);
  assert_string_equal(json_string_value(json_object_get(j, "schema")), "gpucheck/1");
  assert_string_equal(json_string_value(json_object_get(j, "command")), "host");
  assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(j, "facts"), "driver"), "state")), "not-found");
  json_decref(j);
  if (!fake) return;
  /* Compat on a GeForce: exit 1, driver.compat fail with 804. */
  new_root(root);
  driver_host(root, "535.104.05", 1, "NVIDIA GeForce RTX 3090");
  compat_575(root);
  setenv("LD_LIBRARY_PATH", "/usr/local/cuda/compat", 1);
  use_fake("8.6=NVIDIA GeForce RTX 3090", "12090");
  rc = run_cli(root, &j);
  assert_int_equal(rc, 1);
  json_t *c = cli_check(j, "driver.compat");
  assert_non_null(c);
  assert_string_equal(json_string_value(json_object_get(c, "verdict")), "fail");
  assert_int_equal(json_integer_value(json_object_get(json_object_get(c, "data"), "result")), 804);
  json_decref(j);
  unsetenv("LD_LIBRARY_PATH");
  /* A healthy host with only information and ok checks... unless Ember's plan
   * warns: exit 0 or 2, never 1. */
  new_root(root);
  driver_host(root, "580.65.06", 1, "NVIDIA H100 80GB HBM3");
  use_fake("9.0=NVIDIA H100 80GB HBM3", "13000");
  rc = run_cli(root, &j);
  assert_true(rc == 0 || rc == 2);
  assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(json_object_get(j, "facts"), "gpus"), 0), "cc")), "9.0");
  json_decref(j);
  /* The hiding CUDA_VISIBLE_DEVICES through GPUCHECK_ROOT instead of --root is the same. */
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  rc = run_cli(root, &j);
  assert_int_equal(rc, 1);
  assert_string_equal(json_string_value(json_object_get(cli_check(j, "gpus.visible"), "verdict")), "fail");
  json_decref(j);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_proc_version_formats, each),
      cmocka_unit_test_setup(test_sys_version, each),
      cmocka_unit_test_setup(test_gpu_information, each),
      cmocka_unit_test_setup(test_cgroup, each),
      cmocka_unit_test_setup(test_ld_conf, each),
      cmocka_unit_test_setup(test_soname_version, each),
      cmocka_unit_test_setup(test_cvd, each),
      cmocka_unit_test_setup(test_fwd_note, each),
      cmocka_unit_test_setup(test_fwd_note_objcopy, each),
      cmocka_unit_test_setup(test_rule_runtime, each),
      cmocka_unit_test_setup(test_rule_fwd, each),
      cmocka_unit_test_setup(test_rule_lowest_cc, each),
      cmocka_unit_test_setup(test_names, each),
      cmocka_unit_test_setup(test_resolve, each),
      cmocka_unit_test_setup(test_loader_dirs, each),
      cmocka_unit_test_setup(test_libraries_scan, each),
      cmocka_unit_test_setup(test_container_probe, each),
      cmocka_unit_test_setup(test_host_no_driver, each),
      cmocka_unit_test_setup(test_host_stub_only, each),
      cmocka_unit_test_setup(test_host_driver_older_than_runtime, each),
      cmocka_unit_test_setup(test_host_module_library_mismatch, each),
      cmocka_unit_test_setup(test_host_compat_on_geforce, each),
      cmocka_unit_test_setup(test_host_container_requirement, each),
      cmocka_unit_test_setup(test_host_cvd_hides_all, each),
      cmocka_unit_test_setup(test_host_healthy, each),
      cmocka_unit_test_setup(test_host_wsl, each),
      cmocka_unit_test_setup(test_host_live_with_fake, each),
      cmocka_unit_test_setup(test_host_usage, each),
      cmocka_unit_test_setup(test_cli, each),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
