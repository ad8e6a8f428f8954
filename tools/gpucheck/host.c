/* `gpucheck host` (the default command): this machine and this process
 * environment, without creating a CUDA context. Sections Driver, GPUs,
 * Container, Libraries and Ember, each line a check with its verdict, the
 * reason and the fix (the "Say:" lines of gpucheck-anchors.md section 2 are
 * the model); facts as tools/gpucheck/SCHEMA.md documents them.
 *
 * Where the facts come from:
 * - files (probe.h), always relative to --root: kernel module, per-GPU
 *   information, the loader path and the libcuda.so.1 it resolves, forward-
 *   compat copies, CUDA libraries, container markers, device nodes, WSL;
 * - the driver through Ember (em_driver_get_info: dlopen + cuInit, no
 *   context): on the live system always; under --root only when
 *   EMBER_LIBCUDA names a driver (the tests' fake libcuda), since the live
 *   driver says nothing about a copied tree. Without it, GPUs come from
 *   /proc/driver/nvidia/gpus and the CUDA version from the driver branch;
 * - NVML (brands, MIG, its own view of a version mismatch): live system only,
 *   and not when EMBER_LIBCUDA replaces the driver. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arch_table.h"
#include "ember/device.h"
#include "ember/dispatch.h"
#include "gpucheck.h"
#include "probe.h"
#include "require.h"

extern char **environ;

typedef struct hgpu {
  int index;                 /* CUDA ordinal; for GPUs read from /proc only, their position there */
  char name[256];
  int cc, cc_estimated;      /* cc 0 unknown; estimated: guessed from the name */
  char uuid[96], pci[32];
  unsigned long long mem;    /* 0 unknown */
  int proc;                  /* index into host.proc, -1 */
  int brand, brand_from_nvml;/* -1 unknown */
  int mig, mig_pending;      /* -1 unknown, 0 off, 1 on */
} hgpu;

typedef struct host {
  const char *root;          /* NULL: the live system */
  int live;
  const char *ember_libcuda; /* EMBER_LIBCUDA, NULL when unset */
  gc_kmod kmod;
  gc_proc_gpu proc[GC_PROBE_MAX_GPUS];
  size_t n_proc;
  int proc_driver;
  gc_container ct;
  gc_ldpath ld;
  gc_libcuda cuda;
  gc_compat_copy compat[GC_PROBE_MAX_COMPAT];
  size_t n_compat;
  gc_lib libs[GC_PROBE_MAX_LIBS];
  size_t n_libs;
  gc_nvml nvml;
  int nvml_tried;
  em_driver_info drv;
  int have_drv;              /* Ember's driver view was taken */
  int cuda_version, cuda_estimated;
  const char *cuda_source;
  char drv_text[32];         /* the driver version rules compare against, "" unknown */
  hgpu gpus[GC_PROBE_MAX_GPUS];
  size_t n_gpus;
  int gpus_from_cuda;        /* gpus[] are what CUDA enumerates (else /proc) */
  gc_cvd cvd;
  int predicted;             /* 803/804 that the files predict for cuInit, 0 none */
  char predicted_why[400];
  int fwd_rc;                /* gc_rule_fwd of the libcuda in use (worst over GPUs); -2 not a compat copy */
  char fwd_why[400];
  int fwd_gpu;               /* the GPU that decided fwd_rc, -1 */
} host;

/* ----------------------------------------------------------------- helpers --- */

static const char *cuda_text(int v, char buf[16]) { return gc_cuda_str(v, buf); }

static int kmod_branch(const host *h) { return h->kmod.found && !h->kmod.l4t ? h->kmod.v.major : 0; }

static void mem_text(unsigned long long b, char *out, size_t cap) {
  if (!b) snprintf(out, cap, "memory unknown");
  else snprintf(out, cap, "%.1f GiB", (double)b / (1024.0 * 1024.0 * 1024.0));
}

/* The Linux driver that brings CUDA version cuda: the toolkit's own minimum
 * (cuda-compat.md 2.1), else the first branch reporting it. */
static void driver_for(int cuda, char *out, size_t cap) {
  const char *tk = em_toolkit_min_linux_driver(cuda);
  if (tk && *tk) {
    snprintf(out, cap, "%s", tk);
    return;
  }
  int best = 0;
  for (size_t i = 0; i < em_driver_branch_count(); i++) {
    const em_driver_branch_row *r = em_driver_branch_at(i);
    if (r->cuda >= cuda && (!best || r->branch < best)) best = r->branch;
  }
  char b[16];
  if (best) snprintf(out, cap, "R%d", best);
  else snprintf(out, cap, "a driver for CUDA %s", cuda_text(cuda, b));
}

static int same_pci(const char *a, const char *b) {
  unsigned d1, b1, s1, f1, d2, b2, s2, f2;
  if (!a || !b || !*a || !*b) return 0;
  if (sscanf(a, "%x:%x:%x.%x", &d1, &b1, &s1, &f1) != 4 || sscanf(b, "%x:%x:%x.%x", &d2, &b2, &s2, &f2) != 4) return 0;
  return d1 == d2 && b1 == b2 && s1 == s2 && f1 == f2;
}

static const char *state_name(em_driver_state s) {
  switch (s) {
  case EM_DRIVER_OK: return "ok";
  case EM_DRIVER_NOT_FOUND: return "not-found";
  case EM_DRIVER_STUB: return "stub";
  case EM_DRIVER_INIT_FAILED: return "init-failed";
  case EM_DRIVER_NO_DEVICE: return "no-device";
  case EM_DRIVER_TOO_OLD: return "too-old";
  }
  return "init-failed";
}

static const char *dir_of(const char *path, char *buf, size_t cap) {
  snprintf(buf, cap, "%s", path);
  char *s = strrchr(buf, '/');
  if (s && s != buf) *s = '\0';
  return buf;
}

static const char *gpu_label(const hgpu *g, char *buf, size_t cap) {
  char cc[24] = "";
  if (g->cc) snprintf(cc, sizeof cc, ", CC %d.%d%s", g->cc / 10, g->cc % 10, g->cc_estimated ? "?" : "");
  snprintf(buf, cap, "GPU%d (%s%s)", g->index, g->name[0] ? g->name : "unnamed", cc);
  return buf;
}

/* ------------------------------------------------------------------ gather --- */

static void gather_libcuda(host *h) {
  gc_probe_loader_dirs(h->root, getenv("LD_LIBRARY_PATH"), &h->ld);
  gc_probe_libcuda(h->root, &h->ld, &h->cuda);
  int can_load = h->cuda.kind == GC_LIBCUDA_DRIVER || h->cuda.kind == GC_LIBCUDA_COMPAT || h->cuda.kind == GC_LIBCUDA_WSL;
  if (h->live) {
    /* Ember loads libcuda as every CUDA program does (or EMBER_LIBCUDA): its
     * resolved path is the truth on the live system. */
    em_driver_get_info(&h->drv);
    h->have_drv = 1;
    if (h->drv.library_path[0]) {
      gc_libcuda keep = h->cuda;
      snprintf(h->cuda.path, sizeof h->cuda.path, "%s", h->drv.library_path);
      if (strcmp(keep.path, h->drv.library_path)) {
        snprintf(h->cuda.link, sizeof h->cuda.link, "%s", h->ember_libcuda ? h->ember_libcuda : "libcuda.so.1");
        snprintf(h->cuda.from, sizeof h->cuda.from, "%s", h->ember_libcuda ? "EMBER_LIBCUDA" : "dlopen");
      }
      gc_probe_libcuda_classify(NULL, &h->cuda);
    } else {
      h->cuda.kind = GC_LIBCUDA_NONE;
    }
    if (h->drv.state == EM_DRIVER_STUB) h->cuda.kind = GC_LIBCUDA_STUB;
  } else if (h->ember_libcuda && can_load) {
    em_driver_get_info(&h->drv);
    h->have_drv = 1;
  }
}

static void gather_gpus(host *h) {
  if (h->have_drv && h->drv.state == EM_DRIVER_OK) {
    int n = 0;
    if (em_cuda_device_count(&n) != EM_OK) n = 0;
    for (int i = 0; i < n && h->n_gpus < GC_PROBE_MAX_GPUS; i++) {
      em_device_info di;
      if (em_device_get_info(em_cuda(i), &di) != EM_OK) continue;
      hgpu *g = &h->gpus[h->n_gpus++];
      memset(g, 0, sizeof *g);
      g->index = i;
      snprintf(g->name, sizeof g->name, "%s", di.name);
      g->cc = di.cc_major * 10 + di.cc_minor;
      snprintf(g->uuid, sizeof g->uuid, "%s", di.uuid);
      snprintf(g->pci, sizeof g->pci, "%s", di.pci_bus_id);
      g->mem = di.total_memory;
      g->proc = -1;
    }
    h->gpus_from_cuda = 1;
  } else if (!h->have_drv) {
    /* No driver was asked (--root): the kernel module's own list. */
    for (size_t k = 0; k < h->n_proc && h->n_gpus < GC_PROBE_MAX_GPUS; k++) {
      hgpu *g = &h->gpus[h->n_gpus++];
      memset(g, 0, sizeof *g);
      g->index = (int)k;
      snprintf(g->name, sizeof g->name, "%s", h->proc[k].model);
      g->cc = gc_probe_cc_from_name(h->proc[k].model);
      g->cc_estimated = 1;
      snprintf(g->uuid, sizeof g->uuid, "%s", h->proc[k].uuid);
      snprintf(g->pci, sizeof g->pci, "%s", h->proc[k].bus[0] ? h->proc[k].bus : h->proc[k].bdf);
      g->proc = (int)k;
    }
  }
  for (size_t i = 0; i < h->n_gpus; i++) {
    hgpu *g = &h->gpus[i];
    g->brand = -1;
    g->mig = g->mig_pending = -1;
    for (size_t k = 0; k < h->n_proc && g->proc < 0; k++)
      if (same_pci(h->proc[k].bus[0] ? h->proc[k].bus : h->proc[k].bdf, g->pci) || (g->uuid[0] && !strcasecmp(h->proc[k].uuid, g->uuid)))
        g->proc = (int)k;
    for (size_t k = 0; k < h->nvml.n; k++) {
      const gc_nvml_gpu *m = &h->nvml.gpus[k];
      if (!g->uuid[0] || strcasecmp(m->uuid, g->uuid)) continue;
      if (m->brand >= 0) g->brand = m->brand, g->brand_from_nvml = 1;
      if (m->mig_rc == 0) g->mig = m->mig_current == 1, g->mig_pending = m->mig_pending == 1;
      else if (m->mig_rc == 3) g->mig = 0; /* NOT_SUPPORTED: no MIG on this GPU */
    }
    if (g->brand < 0) g->brand = gc_probe_brand_from_name(g->name);
  }
}

static void gather_cuda_version(host *h) {
  int est = 0;
  h->cuda_source = NULL;
  if (h->have_drv && h->drv.driver_version > 0) {
    h->cuda_version = h->drv.driver_version;
    h->cuda_source = "cuDriverGetVersion";
  } else if (h->cuda.kind == GC_LIBCUDA_COMPAT && h->cuda.note.found) {
    h->cuda_version = h->cuda.note.cuda_version;
    h->cuda_estimated = 1;
    h->cuda_source = "forward-compat note";
  } else if (h->cuda.kind != GC_LIBCUDA_NONE && h->cuda.kind != GC_LIBCUDA_STUB && (h->cuda.version[0] || kmod_branch(h))) {
    h->cuda_version = em_driver_cuda_version(h->cuda.version[0] ? h->cuda.version : h->kmod.v.text, &est);
    h->cuda_estimated = 1;
    h->cuda_source = "driver branch table";
  }
  if (h->cuda.version[0]) snprintf(h->drv_text, sizeof h->drv_text, "%s", h->cuda.version);
  else if (kmod_branch(h)) snprintf(h->drv_text, sizeof h->drv_text, "%s", h->kmod.v.text);
  else if (h->nvml.init_rc == 0 && h->nvml.driver[0] && h->ct.wsl != 2) snprintf(h->drv_text, sizeof h->drv_text, "%s", h->nvml.driver);
}

static void gather_predictions(host *h) {
  h->fwd_rc = -2;
  h->fwd_gpu = -1;
  /* A forward-compat libcuda in use: eligible per GPU brand and host branch. */
  if (h->cuda.kind == GC_LIBCUDA_COMPAT) {
    int worst = 0;
    h->fwd_rc = gc_rule_fwd(&h->cuda.note, kmod_branch(h), -1, h->fwd_why, sizeof h->fwd_why);
    for (size_t i = 0; i < h->n_gpus; i++) {
      char why[400];
      int rc = gc_rule_fwd(&h->cuda.note, kmod_branch(h), h->gpus[i].brand, why, sizeof why);
      int rank = rc == 804 ? 4 : rc == 803 ? 3 : rc == -1 ? 2 : 1;
      if (rank > worst) {
        worst = rank;
        h->fwd_rc = rc;
        h->fwd_gpu = (int)i;
        snprintf(h->fwd_why, sizeof h->fwd_why, "%s", why);
      }
    }
    if (h->fwd_rc == 803 || h->fwd_rc == 804) {
      h->predicted = h->fwd_rc;
      snprintf(h->predicted_why, sizeof h->predicted_why, "%s", h->fwd_why);
    }
  }
  /* The driver's own user-mode library must match the kernel module exactly. */
  if (h->cuda.kind == GC_LIBCUDA_DRIVER && h->cuda.version[0] && kmod_branch(h) && strcmp(h->cuda.version, h->kmod.v.text)) {
    h->predicted = 803;
    snprintf(h->predicted_why, sizeof h->predicted_why, "kernel module %s but user-mode libcuda %s", h->kmod.v.text, h->cuda.version);
  }
}

static void gather(host *h) {
  gc_probe_kmod(h->root, &h->kmod);
  h->n_proc = gc_probe_proc_gpus(h->root, h->proc, GC_PROBE_MAX_GPUS);
  h->proc_driver = gc_probe_proc_driver(h->root);
  gc_probe_container(h->root, &h->ct);
  gather_libcuda(h);
  h->n_compat = gc_probe_compat_copies(h->root, h->compat, GC_PROBE_MAX_COMPAT);
  h->n_libs = gc_probe_libraries(h->root, &h->ld, h->libs, GC_PROBE_MAX_LIBS);
  if (h->live && !h->ember_libcuda) {
    gc_probe_nvml(&h->nvml);
    h->nvml_tried = 1;
  } else {
    h->nvml.init_rc = -1;
  }
  gather_gpus(h);
  gather_cuda_version(h);
  const char *uuids[GC_PROBE_MAX_GPUS];
  for (size_t k = 0; k < h->n_proc; k++) uuids[k] = h->proc[k].uuid;
  /* The physical GPUs: the kernel module's list, else NVML's count (it ignores CUDA_VISIBLE_DEVICES). */
  int n_phys = h->n_proc ? (int)h->n_proc : h->nvml.init_rc == 0 && h->nvml.n ? (int)h->nvml.n : -1;
  if (!h->n_proc && n_phys > 0)
    for (size_t k = 0; k < h->nvml.n; k++) uuids[k] = h->nvml.gpus[k].uuid;
  gc_probe_cvd(getenv("CUDA_VISIBLE_DEVICES"), n_phys, uuids, &h->cvd);
  gather_predictions(h);
}

/* ------------------------------------------------------------------ Driver --- */

static void check_module(gc_section *s, host *h) {
  gc_check *c;
  const gc_kmod *k = &h->kmod;
  if (k->found && k->l4t) {
    c = gc_check_add(s, GC_INFO, "driver.module", "Jetson kernel module, L4T release %s (not a driver branch)", k->v.text);
    gc_check_detail(c, "%s: %s. Driver-branch rules (minimum drivers, compat branches) do not apply; the CUDA version comes from libcuda.",
                    k->source, k->note);
  } else if (k->found) {
    c = gc_check_add(s, GC_OK, "driver.module", "Kernel module nvidia %s loaded%s", k->v.text,
                     k->open == 1 ? " (open kernel module)" : k->open == 0 ? " (proprietary kernel module)" : "");
    gc_check_detail(c, "read from %s", k->source);
  } else if (h->ct.wsl == 2) {
    c = gc_check_add(s, GC_INFO, "driver.module", "WSL2: no Linux kernel module; the Windows driver serves the GPU through /dev/dxg");
  } else {
    int any = h->cuda.kind != GC_LIBCUDA_NONE || h->n_proc;
    c = gc_check_add(s, GC_FAIL, "driver.module", "%s", any ? "The nvidia kernel module is not loaded" : "No NVIDIA driver: no kernel module");
    gc_check_detail(c, "%s. Without it no CUDA program can use a GPU: the runtime reports 35 (cudaErrorInsufficientDriver) or 100 (no device).",
                    k->note);
    if (h->ct.inside)
      gc_check_fix(c, "The host must run the NVIDIA driver; containers use the host's kernel module. Check the host with nvidia-smi, "
                      "then start this container with --gpus all.");
    else if (any)
      gc_check_fix(c, "Load it: sudo modprobe nvidia (dmesg says why it fails: a kernel update without rebuilt modules, or Secure "
                      "Boot refusing an unsigned module). After a driver upgrade, reboot.");
    else
      gc_check_fix(c, "Install the NVIDIA driver (your distribution's nvidia-driver package or NVIDIA's .run installer). "
                      "Without an NVIDIA GPU, GPU programs cannot run here: use their CPU mode.");
  }
  json_t *d = json_object();
  json_object_set_new(d, "version", k->found ? json_string(k->v.text) : json_null());
  json_object_set_new(d, "source", k->found ? json_string(k->source) : json_null());
  c->data = d;
}

static void check_libcuda(gc_section *s, host *h) {
  gc_check *c;
  const gc_libcuda *l = &h->cuda;
  char dir[GC_PROBE_PATH];
  switch (l->kind) {
  case GC_LIBCUDA_NONE: {
    c = gc_check_add(s, GC_FAIL, "driver.libcuda", "No libcuda.so.1 on the loader path");
    gc_check_detail(c, "Searched %zu directories (LD_LIBRARY_PATH, /etc/ld.so.conf, the defaults)%s%s%s. A CUDA program then fails "
                       "with 35 (cudaErrorInsufficientDriver: \"CUDA driver version is insufficient\"); PyTorch says \"Found no "
                       "NVIDIA driver on your system\".",
                    h->ld.n, l->stub_seen[0] ? "; only a bare libcuda.so was seen (" : "", l->stub_seen,
                    l->stub_seen[0] ? ", the toolkit's stub or a link for building: it cannot satisfy libcuda.so.1)" : "");
    if (h->ct.inside)
      gc_check_fix(c, "Start the container with GPU access: docker run --gpus all (nvidia-container-toolkit mounts the host's "
                      "libcuda), podman/CDI --device nvidia.com/gpu=all, or request nvidia.com/gpu in Kubernetes.");
    else if (h->kmod.found)
      gc_check_fix(c, "Install the user-mode driver libraries matching kernel module %s (e.g. the libnvidia-compute-%d package), "
                      "or run ldconfig if they are installed outside the cache.",
                   h->kmod.v.text, h->kmod.v.major);
    else
      gc_check_fix(c, "Install the NVIDIA driver.");
    break;
  }
  case GC_LIBCUDA_STUB:
    c = gc_check_add(s, GC_FAIL, "driver.libcuda", "libcuda.so.1 is the CUDA toolkit's stub (%s): cuInit returns 34", l->path);
    gc_check_detail(c, "The stub (CUDA_ERROR_STUB_LIBRARY, 34: \"CUDA driver is a stub library\") exists only so programs can link "
                       "without a driver; found through %s (%s).",
                    l->from[0] ? l->from : "the loader", l->link);
    gc_check_fix(c, "Remove %s from %s so the real driver's libcuda is found%s.", dir_of(l->link, dir, sizeof dir),
                 l->from[0] == '/' || !strcmp(l->from, "LD_LIBRARY_PATH") ? l->from : "the loader path (LD_LIBRARY_PATH, /etc/ld.so.conf.d)",
                 h->ct.inside ? "; start the container with --gpus all so the host's driver is mounted"
                 : h->kmod.found ? "" : "; install the NVIDIA driver");
    break;
  case GC_LIBCUDA_COMPAT:
    c = gc_check_add(s, GC_INFO, "driver.libcuda", "libcuda.so.1 -> %s: a forward-compatibility copy%s%s%s", l->path,
                     l->note.found ? " (CUDA " : "", l->note.found ? l->note.cuda : "", l->note.found ? ")" : "");
    gc_check_detail(c, "found through %s (%s); the driver.compat check says whether this GPU and kernel module may use it", l->from, l->link);
    break;
  case GC_LIBCUDA_WSL:
    c = gc_check_add(s, GC_OK, "driver.libcuda", "libcuda.so.1 -> %s (WSL2's forwarder to the Windows driver)", l->path);
    break;
  default:
    c = gc_check_add(s, GC_OK, "driver.libcuda", "libcuda.so.1 -> %s%s%s%s", l->path, l->version[0] ? " (driver " : "",
                     l->version, l->version[0] ? ")" : " (version not in the file name)");
    gc_check_detail(c, "found through %s (%s)%s", l->from, l->link,
                    h->ember_libcuda ? "; EMBER_LIBCUDA replaces the driver for Ember (a test setting)" : "");
    break;
  }
  if (l->shadowed[0] && l->kind != GC_LIBCUDA_NONE) {
    char *old = c->detail ? strdup(c->detail) : NULL;
    gc_check_detail(c, "%s%sanother libcuda.so.1 later on the path (%s) is not used", old ? old : "", old ? "; " : "", l->shadowed);
    free(old);
  }
  json_t *d = json_object();
  json_object_set_new(d, "kind", json_string(gc_probe_libcuda_kind_name(l->kind)));
  json_object_set_new(d, "path", l->path[0] ? json_string(l->path) : json_null());
  json_object_set_new(d, "link", l->link[0] ? json_string(l->link) : json_null());
  json_object_set_new(d, "version", l->version[0] ? json_string(l->version) : json_null());
  c->data = d;
}

static void check_mismatch(gc_section *s, host *h) {
  gc_check *c;
  int nvml18 = h->nvml.init_rc == 18;
  if (h->cuda.kind != GC_LIBCUDA_DRIVER || !kmod_branch(h) || !h->cuda.version[0]) {
    if (!nvml18) return;
    c = gc_check_add(s, GC_FAIL, "driver.mismatch", "NVML reports a driver/library version mismatch (18)");
    gc_check_detail(c, "nvmlInit_v2 returned NVML_ERROR_LIB_RM_VERSION_MISMATCH: the user-mode libraries (%s) do not match the "
                       "loaded kernel module; CUDA returns 803 (CUDA_ERROR_SYSTEM_DRIVER_MISMATCH).",
                    h->nvml.path);
    gc_check_fix(c, "Reboot after a driver upgrade (or reload the modules: sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia "
                    "&& sudo modprobe nvidia).");
    gc_check_source(c, "SHINE-30");
    return;
  }
  if (!strcmp(h->cuda.version, h->kmod.v.text)) {
    c = gc_check_add(s, GC_OK, "driver.mismatch", "Kernel module and libcuda are the same release (%s)", h->kmod.v.text);
    return;
  }
  c = gc_check_add(s, GC_FAIL, "driver.mismatch", "Kernel module %s but user-mode libcuda %s: cuInit fails with 803",
                   h->kmod.v.text, h->cuda.version);
  gc_check_detail(c, "%s (%s) vs %s: CUDA returns 803 (CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, \"system has unsupported display "
                     "driver / cuda driver combination\") and nvidia-smi says \"Failed to initialize NVML: Driver/library version "
                     "mismatch\".%s",
                  h->kmod.source, h->kmod.v.text, h->cuda.path, nvml18 ? " NVML confirms it (nvmlInit_v2 returned 18)." : "");
  gc_check_source(c, "SHINE-30");
  gc_check_fix(c, "%s", h->ct.inside
                            ? "The image carries its own driver libraries: remove them from the image (nvidia-container-toolkit "
                              "mounts the host's matching ones) or rebuild it on the host's driver release."
                            : "If the driver was just upgraded, reboot (or reload the modules: sudo rmmod nvidia_uvm nvidia_drm "
                              "nvidia_modeset nvidia && sudo modprobe nvidia). Otherwise reinstall one driver release for both parts; "
                              "mixed package and .run installs cause this.");
  json_t *d = json_object();
  json_object_set_new(d, "kernel_module", json_string(h->kmod.v.text));
  json_object_set_new(d, "libcuda", json_string(h->cuda.version));
  c->data = d;
}

static void check_compat(gc_section *s, host *h) {
  gc_check *c;
  char need[32], b1[16], gl[320], dir[GC_PROBE_PATH];
  if (h->cuda.kind == GC_LIBCUDA_COMPAT) {
    const gc_fwd_note *n = &h->cuda.note;
    const hgpu *g = h->fwd_gpu >= 0 ? &h->gpus[h->fwd_gpu] : NULL;
    if (g) gpu_label(g, gl, sizeof gl);
    else snprintf(gl, sizeof gl, "the GPU");
    driver_for(n->cuda_version ? n->cuda_version : 0, need, sizeof need);
    if (h->fwd_rc == 804 || h->fwd_rc == 803) {
      c = gc_check_add(s, GC_FAIL, "driver.compat", "Forward-compatibility libcuda on %s: cuInit returns %d", h->fwd_rc == 804 ? gl : "this host",
                       h->fwd_rc);
      gc_check_detail(c, "%s is a cuda-compat copy (CUDA %s); %s. %s", h->cuda.path, n->cuda[0] ? n->cuda : "?", h->fwd_why,
                      h->fwd_rc == 804 ? "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE: \"forward compatibility was attempted on non "
                                         "supported HW\"; it works only on data-center GPUs, select RTX boards and Jetson."
                                       : "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: the compat user-mode driver does not pair with this "
                                         "kernel module.");
      gc_check_fix(c, "Take %s off the loader path (found through %s) so the host's own libcuda is used, and upgrade the host "
                      "driver to >= %s for CUDA %s%s.",
                   dir_of(h->cuda.link, dir, sizeof dir), h->cuda.from, need, n->cuda[0] ? n->cuda : "?",
                   h->fwd_rc == 804 ? " (forward compatibility is not an option on this GPU)" : " (or install a compat package listing this branch)");
    } else if (h->fwd_rc == 0) {
      c = gc_check_add(s, GC_OK, "driver.compat", "Forward compatibility to CUDA %s is allowed here", n->cuda);
      gc_check_detail(c, "%s", h->fwd_why);
    } else {
      c = gc_check_add(s, GC_WARN, "driver.compat", "Forward-compatibility libcuda in use; eligibility not confirmed");
      gc_check_detail(c, "%s is a cuda-compat copy: %s. On an ineligible GPU cuInit returns 804, on an unlisted kernel-module "
                         "branch 803.",
                      h->cuda.path, h->fwd_why);
      gc_check_fix(c, "Check the GPU's brand (nvidia-smi -q | grep 'Product Brand': data-center, Quadro/RTX professional boards "
                      "and Jetson may use it, GeForce and Titan may not) and that branch %d is supported; otherwise take %s off the "
                      "loader path.",
                   kmod_branch(h), dir_of(h->cuda.link, dir, sizeof dir));
    }
    gc_check_source(c, "FWD");
    json_t *d = json_object();
    json_object_set_new(d, "path", json_string(h->cuda.path));
    json_object_set_new(d, "cuda", n->cuda[0] ? json_string(n->cuda) : json_null());
    json_object_set_new(d, "result", h->fwd_rc >= 0 ? json_integer(h->fwd_rc) : json_null());
    c->data = d;
    return;
  }
  /* Installed but unused copies: say what they would do. */
  for (size_t i = 0; i < h->n_compat; i++) {
    const gc_compat_copy *cp = &h->compat[i];
    char why[400];
    int worst = 0, rc = gc_rule_fwd(&cp->note, kmod_branch(h), -1, why, sizeof why);
    for (size_t k = 0; k < h->n_gpus; k++) {
      char w[400];
      int r = gc_rule_fwd(&cp->note, kmod_branch(h), h->gpus[k].brand, w, sizeof w);
      int rank = r == 804 ? 4 : r == 803 ? 3 : r == -1 ? 2 : 1;
      if (rank > worst) worst = rank, rc = r, snprintf(why, sizeof why, "%s", w);
    }
    c = gc_check_add(s, GC_INFO, "driver.compat", "cuda-compat %s installed but not on the loader path%s%s%s", cp->path,
                     cp->note.found ? " (CUDA " : "", cp->note.found ? cp->note.cuda : "", cp->note.found ? ")" : "");
    gc_check_detail(c, "If a program put it on its loader path: %s%s. The driver in use supports CUDA %s.",
                    rc == 0 ? "it would work: " : rc > 0 ? "cuInit would fail: " : "not decidable: ", why,
                    cuda_text(h->cuda_version, b1));
    gc_check_source(c, "FWD");
  }
}

static void check_cuda(gc_section *s, host *h) {
  char b[16];
  if (!h->cuda_version) return;
  gc_check *c = gc_check_add(s, GC_INFO, "driver.cuda", "Driver supports CUDA %s and older%s", cuda_text(h->cuda_version, b),
                             h->cuda_estimated ? " (estimated)" : "");
  gc_check_detail(c, "from %s%s%s", h->cuda_source, h->cuda_estimated && !strcmp(h->cuda_source, "driver branch table") ? " for " : "",
                  h->cuda_estimated && !strcmp(h->cuda_source, "driver branch table") ? h->drv_text : "");
  json_t *d = json_object();
  json_object_set_new(d, "cuda", json_integer(h->cuda_version));
  json_object_set_new(d, "source", json_string(h->cuda_source));
  c->data = d;
}

static void check_init(gc_section *s, host *h) {
  gc_check *c;
  if (!h->have_drv) {
    if (h->root && h->cuda.kind != GC_LIBCUDA_NONE && h->cuda.kind != GC_LIBCUDA_STUB)
      gc_check_add(s, GC_INFO, "driver.init", "cuInit not run (--root without EMBER_LIBCUDA): GPUs read from /proc/driver/nvidia/gpus");
    return;
  }
  const em_driver_info *d = &h->drv;
  switch (d->state) {
  case EM_DRIVER_OK:
    c = gc_check_add(s, GC_OK, "driver.init", "cuInit succeeded: %zu GPU%s visible to CUDA", h->n_gpus, h->n_gpus == 1 ? "" : "s");
    if (!h->live) gc_check_detail(c, "device side simulated by EMBER_LIBCUDA=%s", h->ember_libcuda);
    break;
  case EM_DRIVER_NO_DEVICE:
    c = gc_check_add(s, GC_FAIL, "driver.init", "CUDA sees no GPU (cuInit: 100, CUDA_ERROR_NO_DEVICE)");
    gc_check_detail(c, "%s", d->message);
    if (h->cvd.set && (h->cvd.empty || h->cvd.truncated_at == 0))
      gc_check_fix(c, "CUDA_VISIBLE_DEVICES hides every GPU: see gpus.visible.");
    else if (h->ct.inside && (!h->ct.nvidiactl || !h->ct.n_dev_gpus))
      gc_check_fix(c, "The container has no GPU device nodes: start it with --gpus all.");
    else gc_check_fix(c, "Check that nvidia-smi lists the GPUs and that CUDA_VISIBLE_DEVICES is unset or lists them.");
    break;
  case EM_DRIVER_INIT_FAILED:
    c = gc_check_add(s, GC_FAIL, "driver.init", "cuInit failed with %d", d->cuda_error);
    gc_check_detail(c, "%s", d->message);
    gc_check_fix(c, "gpucheck explain %d says what it means and what to check.", d->cuda_error);
    break;
  case EM_DRIVER_TOO_OLD:
    c = gc_check_add(s, GC_FAIL, "driver.init", "The CUDA driver is too old for Ember");
    gc_check_detail(c, "%s", d->message);
    gc_check_fix(c, "Install an R418 or newer driver.");
    break;
  default: /* not found and stub: driver.libcuda says it */
    return;
  }
  json_t *j = json_object();
  json_object_set_new(j, "state", json_string(state_name(d->state)));
  json_object_set_new(j, "cuda_error", json_integer(d->cuda_error));
  c->data = j;
}

static void check_nvml(gc_section *s, host *h) {
  if (!h->nvml_tried) return;
  gc_check *c;
  if (!h->nvml.loaded) {
    gc_check_add(s, GC_INFO, "driver.nvml", "NVML (libnvidia-ml.so.1) not loadable: MIG mode and GPU brands not readable");
    return;
  }
  int rc = h->nvml.init_rc;
  if (rc == 0) {
    c = gc_check_add(s, GC_INFO, "driver.nvml", "NVML %s reads %zu GPU%s", h->nvml.driver, h->nvml.n, h->nvml.n == 1 ? "" : "s");
    gc_check_detail(c, "%s", h->nvml.path);
    return;
  }
  if (rc == 18) return; /* driver.mismatch reports it */
  c = gc_check_add(s, GC_WARN, "driver.nvml", "NVML cannot initialise: %s (%d)", gc_probe_nvml_error_name(rc), rc);
  gc_check_detail(c, "%s; nvidia-smi fails the same way", h->nvml.note);
  gc_check_fix(c, "%s", rc == 9 ? "Load the nvidia kernel module (sudo modprobe nvidia)."
                      : rc == 4 ? "Give this user access to /dev/nvidia* (group video or render, or the device's permissions)."
                      : rc == 999 && h->ct.inside ? "The container lost its GPU cgroup rules (often after systemctl daemon-reload on the host): "
                                                    "restart the container; on the host, nvidia-ctk system create-dev-char-symlinks --create-all prevents it."
                                                  : "Run nvidia-smi for the driver's own message; dmesg shows kernel-side errors.");
}

static void section_driver(gc_report *r, host *h) {
  gc_section *s = gc_section_add(r, "Driver");
  check_module(s, h);
  check_libcuda(s, h);
  check_mismatch(s, h);
  check_compat(s, h);
  check_cuda(s, h);
  check_init(s, h);
  check_nvml(s, h);
}

/* -------------------------------------------------------------------- GPUs --- */

static void check_gpu(gc_section *s, host *h, const hgpu *g) {
  char id[32], mem[32], mig[64] = "", arch[96];
  snprintf(id, sizeof id, "gpu%d", g->index);
  mem_text(g->mem, mem, sizeof mem);
  const em_arch_row *row = g->cc ? em_arch_lookup(g->cc) : NULL;
  if (g->cc) snprintf(arch, sizeof arch, "CC %d.%d%s %s", g->cc / 10, g->cc % 10, g->cc_estimated ? " (from its name)" : "", em_arch_name(g->cc));
  else snprintf(arch, sizeof arch, "CC unknown");
  if (g->mig == 1) snprintf(mig, sizeof mig, ", MIG on");
  else if (g->mig == 0) snprintf(mig, sizeof mig, ", MIG off");
  gc_verdict v = g->cc && row && strcmp(row->arch, "unknown") ? GC_OK : g->cc_estimated ? GC_INFO : GC_WARN;
  gc_check *c = gc_check_add(s, v, id, "GPU%d: %s, %s, %s%s", g->index, g->name[0] ? g->name : "unnamed", arch, mem, mig);
  char detail[600];
  snprintf(detail, sizeof detail, "PCI %s, %s%s%s", g->pci[0] ? g->pci : "unknown", g->uuid[0] ? g->uuid : "UUID unknown",
           g->brand >= 0 ? ", brand " : "", g->brand >= 0 ? gc_probe_brand_name(g->brand) : "");
  if (g->brand >= 0 && !g->brand_from_nvml) snprintf(detail + strlen(detail), sizeof detail - strlen(detail), " (from its name)");
  if (g->mig == 1)
    snprintf(detail + strlen(detail), sizeof detail - strlen(detail),
             "; MIG is on: CUDA programs see MIG instances (select one with CUDA_VISIBLE_DEVICES=MIG-<uuid>, nvidia-smi -L lists them)");
  if (!h->gpus_from_cuda) snprintf(detail + strlen(detail), sizeof detail - strlen(detail), "; read from /proc/driver/nvidia/gpus");
  gc_check_detail(c, "%s", detail);
  if (v == GC_WARN)
    gc_check_fix(c, "This compute capability is unknown to gpucheck's table (arch_table): update gpucheck; verdicts about code "
                    "for this GPU are less certain.");
  if (g->mig == 1 && g->mig_pending == 0) {
    c->verdict = GC_WARN;
    gc_check_fix(c, "MIG is being turned off but a GPU reset is pending: nvidia-smi -r -i %d (or reboot).", g->index);
  } else if (g->mig == 0 && g->mig_pending == 1) {
    c->verdict = GC_WARN;
    gc_check_fix(c, "MIG is being turned on but a GPU reset is pending: nvidia-smi -r -i %d (or reboot).", g->index);
  }
}

static void check_visible(gc_section *s, host *h) {
  const gc_cvd *v = &h->cvd;
  gc_check *c;
  int phys = h->n_proc ? (int)h->n_proc : h->nvml.init_rc == 0 ? (int)h->nvml.n : 0;
  const char *val = getenv("CUDA_VISIBLE_DEVICES");
  if (!v->set) {
    if (h->gpus_from_cuda && phys && (int)h->n_gpus < phys) {
      c = gc_check_add(s, h->ct.inside ? GC_INFO : GC_WARN, "gpus.visible", "CUDA sees %zu of the %d GPUs the driver lists", h->n_gpus, phys);
      gc_check_detail(c, "%s", h->ct.inside ? "/proc/driver/nvidia/gpus lists the host's GPUs; this container was given a subset"
                                            : "CUDA_VISIBLE_DEVICES is unset, so a GPU failed to initialise or its device node is missing");
      if (!h->ct.inside) gc_check_fix(c, "nvidia-smi and dmesg show which GPU failed (Xid errors, 'fallen off the bus').");
    } else if (h->n_gpus > 1) {
      c = gc_check_add(s, GC_INFO, "gpus.visible", "CUDA_VISIBLE_DEVICES unset: CUDA numbers the %zu GPUs fastest first", h->n_gpus);
      gc_check_detail(c, "nvidia-smi numbers them by PCI bus; CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA agree, UUIDs avoid the question");
    }
    return;
  }
  char all[48];
  if (phys) snprintf(all, sizeof all, "all %d GPU%s", phys, phys == 1 ? "" : "s");
  else snprintf(all, sizeof all, "every GPU");
  if (v->empty || v->truncated_at == 0) {
    c = gc_check_add(s, GC_FAIL, "gpus.visible", "CUDA_VISIBLE_DEVICES='%s' hides %s", val, all);
    if (v->empty) gc_check_detail(c, "an empty CUDA_VISIBLE_DEVICES hides every device: CUDA programs get 100 (no CUDA-capable device)");
    else gc_check_detail(c, "its first item '%s' is invalid (%s) and the driver stops reading the list there: CUDA programs get 100 "
                            "(no CUDA-capable device)", v->invalid, v->why);
    gc_check_fix(c, "Unset CUDA_VISIBLE_DEVICES, or list the GPUs to use: CUDA_VISIBLE_DEVICES=0%s (indices or GPU-UUIDs from nvidia-smi -L).",
                 phys > 1 ? ",1" : "");
  } else if (v->truncated_at > 0) {
    c = gc_check_add(s, GC_WARN, "gpus.visible", "CUDA_VISIBLE_DEVICES='%s': only the first %d item%s count", val, v->n_valid,
                     v->n_valid == 1 ? "" : "s");
    gc_check_detail(c, "item %d '%s' is invalid (%s); the driver ignores it and everything after it", v->truncated_at, v->invalid, v->why);
    gc_check_fix(c, "Fix or remove '%s' (valid items: indices below %d, GPU-UUIDs, MIG-UUIDs).", v->invalid, phys ? phys : 1);
  } else {
    /* What CUDA enumerated is the truth; the list alone when no driver was asked. */
    int seen = h->gpus_from_cuda ? (int)h->n_gpus : v->visible;
    if (seen >= 0 && phys)
      c = gc_check_add(s, GC_INFO, "gpus.visible", "CUDA_VISIBLE_DEVICES='%s': CUDA sees %d of the %d GPUs", val, seen, phys);
    else if (seen >= 0)
      c = gc_check_add(s, GC_INFO, "gpus.visible", "CUDA_VISIBLE_DEVICES='%s': CUDA sees %d GPU%s", val, seen, seen == 1 ? "" : "s");
    else
      c = gc_check_add(s, GC_INFO, "gpus.visible", "CUDA_VISIBLE_DEVICES='%s' names %d device%s", val, v->n_valid,
                       v->n_valid == 1 ? "" : "s");
    gc_check_detail(c, "visible devices are renumbered from 0 in the listed order%s", v->mig ? "; MIG- items need MIG mode on" : "");
    if (h->gpus_from_cuda && !v->mig && seen < v->n_valid) {
      /* Without the physical count the list could not be checked; CUDA's answer shows an item was dropped. */
      c->verdict = GC_WARN;
      gc_check_detail(c, "the variable names %d devices but CUDA shows %d: an item is out of range or repeats one, and the driver "
                         "ignores it and everything after it", v->n_valid, seen);
      gc_check_fix(c, "List only existing GPUs (nvidia-smi -L shows indices and UUIDs).");
    }
  }
  json_t *d = json_object();
  json_object_set_new(d, "value", json_string(val));
  json_object_set_new(d, "visible", v->visible >= 0 ? json_integer(v->visible) : json_null());
  json_object_set_new(d, "truncated_at", v->truncated_at >= 0 ? json_integer(v->truncated_at) : json_null());
  c->data = d;
}

static void section_gpus(gc_report *r, host *h) {
  gc_section *s = gc_section_add(r, "GPUs");
  for (size_t i = 0; i < h->n_gpus; i++) check_gpu(s, h, &h->gpus[i]);
  check_visible(s, h);
  if (h->nvml_tried && !h->nvml.loaded && h->n_gpus)
    gc_check_add(s, GC_INFO, "gpus.mig", "MIG mode not readable (NVML absent)");
  else if (!h->nvml_tried && h->n_gpus)
    gc_check_add(s, GC_INFO, "gpus.mig", "MIG mode not readable (%s: NVML is not consulted)",
                 h->live ? "EMBER_LIBCUDA replaces the driver" : "--root");
  if (!h->n_gpus && h->have_drv && h->drv.state == EM_DRIVER_OK) {
    gc_check *c = gc_check_add(s, GC_FAIL, "gpus.none", "No GPU visible to CUDA");
    gc_check_fix(c, "Check nvidia-smi and CUDA_VISIBLE_DEVICES.");
  } else if (!h->n_gpus) {
    /* The Driver section already failed and says why; say so here too, so
     * an empty GPU list is never mistaken for a check that was skipped. */
    gc_check_add(s, GC_INFO, "gpus.none", "No GPU listed: the driver is not usable (see Driver)");
  }
}

/* --------------------------------------------------------------- Container --- */

static void check_runtime(gc_section *s, host *h) {
  gc_check *c;
  if (h->ct.inside) {
    c = gc_check_add(s, GC_INFO, "container.runtime", "Inside a %s container", h->ct.runtime[0] ? h->ct.runtime : "");
    gc_check_detail(c, "%s", h->ct.evidence);
  } else {
    gc_check_add(s, GC_INFO, "container.runtime", "Not in a container (no /.dockerenv, /run/.containerenv or container cgroup)");
  }
}

static void check_nodes(gc_section *s, host *h, gc_nvd nvd) {
  gc_check *c;
  const gc_container *t = &h->ct;
  if (t->wsl) return; /* WSL has /dev/dxg instead: container.wsl */
  int have = t->nvidiactl && t->n_dev_gpus;
  if (have && t->uvm) {
    c = gc_check_add(s, GC_OK, "container.device_nodes", "Device nodes present: nvidiactl %s nvidia-uvm", t->dev_gpus);
  } else if (have) {
    c = gc_check_add(s, GC_WARN, "container.device_nodes", "/dev/nvidia-uvm is missing (nvidiactl and %s are present)", t->dev_gpus);
    gc_check_detail(c, "CUDA needs the unified-memory device; without it cuInit fails%s",
                    t->inside ? "" : ". Outside containers nvidia-modprobe creates it on first use");
    gc_check_fix(c, "%s", t->inside ? "Start the container with --gpus all (the toolkit adds nvidia-uvm) or add --device /dev/nvidia-uvm."
                                    : "sudo modprobe nvidia-uvm (or run any CUDA program once as root); check that nvidia-modprobe is installed.");
  } else if (t->inside) {
    c = gc_check_add(s, GC_FAIL, "container.device_nodes", "No GPU device nodes in this container (/dev/nvidiactl%s)",
                     t->nvidiactl ? " present, no /dev/nvidiaN" : ", /dev/nvidia0 missing");
    gc_check_detail(c, "the container was not given GPUs%s%s%s; %s", nvd == GC_NVD_VOID || nvd == GC_NVD_NONE || nvd == GC_NVD_EMPTY ? " (NVIDIA_VISIBLE_DEVICES=" : "",
                    nvd == GC_NVD_VOID || nvd == GC_NVD_NONE || nvd == GC_NVD_EMPTY ? gc_probe_nvd_name(nvd) : "",
                    nvd == GC_NVD_VOID || nvd == GC_NVD_NONE || nvd == GC_NVD_EMPTY ? " asks for none)" : "",
                    h->proc_driver ? "/proc/driver/nvidia is visible, so the host has the driver" : "CUDA reports 100 (no device) or 35");
    gc_check_fix(c, "docker run --gpus all (nvidia-container-toolkit), podman run --device nvidia.com/gpu=all (CDI), or request "
                    "nvidia.com/gpu in the Kubernetes pod's resources.");
  } else if (h->kmod.found) {
    c = gc_check_add(s, GC_WARN, "container.device_nodes", "Kernel module loaded but /dev/nvidiactl or /dev/nvidia0 missing");
    gc_check_detail(c, "outside containers the nodes appear on first use through nvidia-modprobe (setuid) or udev rules");
    gc_check_fix(c, "Run nvidia-smi once (it creates them); if it fails, check that nvidia-modprobe is installed and dmesg.");
  } else {
    return; /* no driver at all: driver.module says it */
  }
  json_t *d = json_object();
  json_object_set_new(d, "nvidiactl", json_boolean(t->nvidiactl));
  json_object_set_new(d, "nvidia_uvm", json_boolean(t->uvm));
  json_object_set_new(d, "gpus", json_string(t->dev_gpus));
  c->data = d;
}

static void check_nvd(gc_section *s, host *h, gc_nvd nvd) {
  const char *val = getenv("NVIDIA_VISIBLE_DEVICES");
  if (nvd == GC_NVD_UNSET) return;
  gc_check *c;
  if (!h->ct.inside) {
    c = gc_check_add(s, GC_INFO, "container.visible_devices", "NVIDIA_VISIBLE_DEVICES='%s' has no effect here", val);
    gc_check_detail(c, "only container runtimes read it, to choose the GPUs to give a container; use CUDA_VISIBLE_DEVICES to hide "
                       "GPUs from a process");
    return;
  }
  static const char *const meaning[] = {"", "no GPU (empty)", "no GPU (void: the NVIDIA hook does nothing)",
                                        "no GPU, but the driver libraries are mounted (none)", "every GPU (all)",
                                        "the GPUs listed"};
  c = gc_check_add(s, GC_INFO, "container.visible_devices", "NVIDIA_VISIBLE_DEVICES='%s': the image asks for %s", val, meaning[nvd]);
  gc_check_detail(c, "the runtime decides at container start; the device nodes present (%s) are what this container got",
                  h->ct.n_dev_gpus ? h->ct.dev_gpus : "none");
}

/* One NVIDIA_REQUIRE_* (or the legacy CUDA_VERSION) requirement. */
static void check_one_requirement(gc_section *s, host *h, const char *var, const char *text, int disabled) {
  gc_req req;
  gc_req_error err;
  gc_check *c;
  char id[96];
  snprintf(id, sizeof id, "container.require.%s", var);
  for (char *p = id; *p; p++) *p = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
  if (gc_req_parse(text, &req, &err)) {
    c = gc_check_add(s, GC_WARN, id, "%s is malformed: the container runtime refuses to start the image", var);
    gc_check_detail(c, "at offset %zu: %s", err.offset, err.msg);
    gc_check_fix(c, "Fix the image's %s (grammar: space-separated alternatives of comma-joined cuda/driver/arch/brand conditions).", var);
    return;
  }
  gc_req_gpu gpus[GC_PROBE_MAX_GPUS];
  size_t n = 0;
  for (size_t i = 0; i < h->n_gpus; i++) {
    const gc_brand *b = NULL;
    for (size_t k = 0; h->gpus[i].brand >= 0 && k < gc_brand_count() && !b; k++)
      if (gc_brand_at(k)->nvml == h->gpus[i].brand) b = gc_brand_at(k);
    gpus[n].cc = h->gpus[i].cc;
    gpus[n].brand = b ? b->name : NULL;
    n++;
  }
  char drv[32] = "";
  if (kmod_branch(h)) snprintf(drv, sizeof drv, "%s", h->kmod.v.text);
  else if (h->drv_text[0]) snprintf(drv, sizeof drv, "%s", h->drv_text);
  /* The runtime checks the image on the host, against the host driver's own
   * CUDA version: a compat libcuda inside the container does not count. */
  int est, host_cuda = h->cuda.kind == GC_LIBCUDA_COMPAT ? (kmod_branch(h) ? em_driver_cuda_version(h->kmod.v.text, &est) : 0)
                                                          : h->cuda_version;
  gc_req_ctx ctx = {.cuda = host_cuda, .driver = drv[0] ? drv : NULL, .gpus = gpus, .n_gpus = n, .strict = 0};
  gc_req_result res;
  if (gc_req_evaluate(&req, &ctx, &res)) {
    gc_req_free(&req);
    return;
  }
  char b1[16], host_txt[200];
  snprintf(host_txt, sizeof host_txt, "driver %s (CUDA %s)%s%s", drv[0] ? drv : "unknown", cuda_text(host_cuda, b1),
           h->n_gpus ? ", " : "", h->n_gpus ? h->gpus[0].name : "");
  if (res.verdict == GC_TRI_TRUE) {
    int t = res.n ? res.per[0].satisfied_term : -1;
    char term[200] = "";
    if (t >= 0) gc_req_term_str(&req, (size_t)t, term, sizeof term);
    c = gc_check_add(s, GC_OK, id, "%s='%s' is met%s%s", var, text, t >= 0 ? " by " : "", term);
    gc_check_detail(c, "host: %s", host_txt);
  } else {
    char msg[300] = "", blocker[120] = "";
    gc_req_libnvc_message(&req, msg, sizeof msg);
    const gc_req_eval *e = res.deciding >= 0 ? &res.per[res.deciding] : NULL;
    if (e && req.n_terms) {
      int bi = gc_req_term_blocker(&req, e, 0);
      if (bi >= 0) gc_req_cond_str(&req, (size_t)bi, blocker, sizeof blocker);
    }
    gc_verdict v = res.verdict == GC_TRI_FALSE ? (disabled ? GC_WARN : GC_FAIL) : GC_WARN;
    c = gc_check_add(s, v, id, "%s='%s' is %s by this host", var, text, res.verdict == GC_TRI_FALSE ? "not met" : "perhaps not met");
    gc_check_detail(c, "host: %s; no alternative holds%s%s%s. The container runtime says: \"%s\"", host_txt,
                    blocker[0] ? " (the first fails on " : "", blocker, blocker[0] ? ")" : "", msg[0] ? msg : "requirement error");
    /* The first term's cuda>= is the usual minimum; say what driver gives it. */
    char need[32] = "";
    for (size_t k = 0; req.n_terms && k < req.terms[0].n; k++) {
      const gc_req_cond *cd = &req.conds[req.terms[0].first + k];
      if (cd->rule == GC_REQ_CUDA && (cd->op == GC_REQ_GE || cd->op == GC_REQ_GT)) {
        gc_version want;
        if (gc_probe_parse_version(cd->value, strlen(cd->value), &want) == 0)
          driver_for(want.major * 1000 + (want.minor > 0 ? want.minor : 0) * 10, need, sizeof need);
      }
    }
    if (disabled)
      gc_check_fix(c, "NVIDIA_DISABLE_REQUIRE is set, so the container starts anyway; inside, only minor-version compatibility "
                      "lets a newer CUDA runtime run (no PTX JIT of newer PTX, newer APIs fail with 36). Upgrade the host driver%s%s.",
                   need[0] ? " to >= " : "", need);
    else
      gc_check_fix(c, "Upgrade the host driver%s%s, or use an image built for CUDA %s or older. NVIDIA_DISABLE_REQUIRE=1 skips the "
                      "check, but then only minor-version compatibility lets it run.",
                   need[0] ? " to >= " : "", need, cuda_text(host_cuda, b1));
  }
  json_t *d = json_object();
  json_object_set_new(d, "variable", json_string(var));
  json_object_set_new(d, "requirement", json_string(text));
  json_object_set_new(d, "result", json_string(gc_tri_name(res.verdict)));
  c->data = d;
  gc_req_result_free(&res);
  gc_req_free(&req);
}

static void check_requirements(gc_section *s, host *h, char *require_cuda, size_t cap) {
  const char *dis = getenv("NVIDIA_DISABLE_REQUIRE");
  int disabled = dis && gc_req_disabled_by(dis);
  int any = 0;
  require_cuda[0] = '\0';
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "NVIDIA_REQUIRE_", 15)) continue;
    const char *eq = strchr(*e, '=');
    if (!eq) continue;
    char var[64];
    snprintf(var, sizeof var, "%.*s", (int)(eq - *e), *e);
    if (!strcmp(var, "NVIDIA_REQUIRE_JETPACK")) continue; /* not a --require expression (cuda_image.go) */
    if (!strcmp(var, "NVIDIA_REQUIRE_CUDA")) snprintf(require_cuda, cap, "%s", eq + 1);
    check_one_requirement(s, h, var, eq + 1, disabled);
    any = 1;
  }
  /* A legacy image (CUDA_VERSION set, no NVIDIA_REQUIRE_CUDA) requires cuda>=major.minor. */
  const char *cv = getenv("CUDA_VERSION");
  gc_version v;
  if (!getenv("NVIDIA_REQUIRE_CUDA") && cv && gc_probe_parse_version(cv, strlen(cv), &v) == 0 && v.minor >= 0) {
    char text[32];
    snprintf(text, sizeof text, "cuda>=%d.%d", v.major, v.minor);
    snprintf(require_cuda, cap, "%s", text);
    check_one_requirement(s, h, "CUDA_VERSION", text, disabled);
    any = 1;
  }
  if (disabled) {
    gc_check *c = gc_check_add(s, any ? GC_WARN : GC_INFO, "container.disable_require", "NVIDIA_DISABLE_REQUIRE='%s' turns the image's "
                               "requirement checks off", dis);
    gc_check_detail(c, "the container starts even when the driver is older than the image's CUDA; it then runs only within "
                       "minor-version compatibility, and fails with 35 across a major version");
    if (any) gc_check_fix(c, "Prefer a driver that meets the requirement; keep the variable only for images known to work under minor-version compatibility.");
  }
}

static void check_wsl(gc_section *s, host *h) {
  const gc_container *t = &h->ct;
  gc_check *c;
  if (!t->wsl) return;
  if (t->wsl == 1) {
    c = gc_check_add(s, GC_FAIL, "container.wsl", "WSL1: no GPU access");
    gc_check_detail(c, "/proc/version says Microsoft without WSL2 and /dev/dxg is absent: only WSL2 forwards the GPU");
    gc_check_fix(c, "Convert the distribution: wsl --set-version <distro> 2 (in Windows), with a current Windows NVIDIA driver.");
    return;
  }
  if (!t->dxg || !t->wsl_lib) {
    c = gc_check_add(s, GC_FAIL, "container.wsl", "WSL2 without GPU forwarding (%s missing)", !t->dxg ? "/dev/dxg" : "/usr/lib/wsl/lib/libcuda.so.1");
    gc_check_detail(c, "WSL2 gets the GPU from the Windows driver through /dev/dxg and the libraries in /usr/lib/wsl/lib");
    gc_check_fix(c, "Install or update the NVIDIA driver in Windows (not inside WSL), then wsl --update and wsl --shutdown.");
    return;
  }
  if (h->cuda.kind != GC_LIBCUDA_WSL && h->cuda.kind != GC_LIBCUDA_NONE) {
    c = gc_check_add(s, GC_FAIL, "container.wsl", "A Linux libcuda (%s) shadows WSL's /usr/lib/wsl/lib/libcuda.so.1", h->cuda.path);
    gc_check_detail(c, "a Linux NVIDIA driver installed inside WSL breaks the forwarding to the Windows driver");
    gc_check_fix(c, "Remove the Linux driver packages inside WSL (e.g. sudo apt remove --purge 'libnvidia-compute-*' 'nvidia-driver-*'); "
                    "install only the Windows driver, and keep /usr/lib/wsl/lib first on the loader path.");
    return;
  }
  gc_check_add(s, GC_OK, "container.wsl", "WSL2 with GPU forwarding (/dev/dxg, /usr/lib/wsl/lib)");
}

static void section_container(gc_report *r, host *h, char *require_cuda, size_t cap) {
  gc_section *s = gc_section_add(r, "Container");
  gc_nvd nvd = gc_probe_nvd(getenv("NVIDIA_VISIBLE_DEVICES"));
  check_runtime(s, h);
  check_nodes(s, h, nvd);
  check_nvd(s, h, nvd);
  check_requirements(s, h, require_cuda, cap);
  check_wsl(s, h);
}

/* --------------------------------------------------------------- Libraries --- */

/* CUDA version a runtime-side library belongs to, from its file version:
 * cudart and NVRTC carry the toolkit's; cuBLAS only its major. */
static int lib_cuda_of(const gc_lib *l, int *minor_known) {
  *minor_known = 0;
  if (!l->version[0] || l->v.major < 1 || l->v.major > 99) return 0;
  if (!strcmp(l->name, "cudart") || !strcmp(l->name, "nvrtc")) {
    *minor_known = l->v.minor >= 0;
    return l->v.major * 1000 + (l->v.minor > 0 ? l->v.minor : 0) * 10;
  }
  if (!strcmp(l->name, "cublas") || !strcmp(l->name, "cublasLt")) return l->v.major * 1000;
  return 0;
}

static void check_lib(gc_section *s, host *h, size_t i) {
  const gc_lib *l = &h->libs[i];
  char id[64], why[400] = "", need[32] = "", b1[16];
  snprintf(id, sizeof id, "lib.%s.%d", l->name, l->version[0] ? l->v.major : 0);
  int minor_known, lib_cuda = lib_cuda_of(l, &minor_known);
  gc_verdict v = GC_OK;
  int rc = -2;
  if (lib_cuda) {
    if (h->cuda_version) rc = gc_rule_runtime(lib_cuda, minor_known, h->cuda_version, h->drv_text[0] ? h->drv_text : NULL, why,
                                              sizeof why, need, sizeof need);
    else snprintf(why, sizeof why, "not checked against the driver: no usable driver");
    v = rc == 35 ? GC_FAIL : rc == 1 ? GC_WARN : rc == 0 ? GC_OK : GC_INFO;
  } else {
    v = GC_INFO;
    snprintf(why, sizeof why, "%s", !strncmp(l->name, "cudnn", 5) || !strcmp(l->name, "nccl")
                                        ? "its driver needs are those of the CUDA runtime it was built for (not in the file name)"
                                        : "version not in the file name");
  }
  gc_check *c = gc_check_add(s, v, id, "lib%s %s%s%s", l->name, l->version[0] ? l->version : "(version unknown)",
                             rc == 35 ? ": needs a newer driver (35)" : rc == 1 ? ": newer than the driver" : "", "");
  char detail[1200];
  snprintf(detail, sizeof detail, "%s (%s, found through %s); %s", l->path, l->link, l->from, why);
  if (rc == 35) {
    snprintf(detail + strlen(detail), sizeof detail - strlen(detail),
             ". Programs using it fail with cudaErrorInsufficientDriver (35): \"CUDA driver version is insufficient for CUDA runtime version\"");
    gc_check_source(c, "MVC");
    gc_check_fix(c, "Upgrade the driver to >= %s, or use a build for CUDA %s or older (e.g. a PyTorch wheel of that CUDA "
                    "variant). Forward compatibility (cuda-compat-%d-x) is an option only on data-center GPUs.",
                 need[0] ? need : "a newer release", cuda_text(h->cuda_version, b1), lib_cuda / 1000);
  } else if (rc == 1) {
    gc_check_fix(c, "Upgrade the driver to >= %s for full CUDA %s support, or ship SASS (cubins) for every GPU instead of relying on PTX.",
                 need[0] ? need : "the toolkit's own", cuda_text(lib_cuda, b1));
    gc_check_source(c, "MVC");
  }
  /* Lowest CC of cuDNN and cuBLAS against every GPU. */
  const char *family = !strcmp(l->name, "cudnn") ? "cudnn" : !strcmp(l->name, "cublas") || !strcmp(l->name, "cublasLt") ? "cublas" : NULL;
  /* A cuDNN known only by its major (libcudnn.so.9 as a file) spans releases with different minimum CCs. */
  if (family && l->version[0] && (l->v.minor >= 0 || strcmp(family, "cudnn"))) {
    int high = 0;
    const char *row = NULL;
    int low = gc_rule_lib_lowest_cc(family, &l->v, &high, &row);
    for (size_t g = 0; low && g < h->n_gpus; g++) {
      const hgpu *gp = &h->gpus[g];
      char gl[320];
      if (!gp->cc) continue;
      if (gp->cc < low) {
        c->verdict = GC_FAIL;
        snprintf(detail + strlen(detail), sizeof detail - strlen(detail), "; %s %s supports CC %d.%d and newer: %s is older",
                 family, row ? row : l->version, low / 10, low % 10, gpu_label(gp, gl, sizeof gl));
        if (!c->fix)
          gc_check_fix(c, "Use a %s release that still supports CC %d.%d (see arch_table's libreq rows) on that GPU, or run it on a newer GPU.",
                       family, gp->cc / 10, gp->cc % 10);
      } else if (gp->cc < high) {
        if (c->verdict < GC_WARN) c->verdict = GC_WARN;
        snprintf(detail + strlen(detail), sizeof detail - strlen(detail), "; some %s %s builds need CC %d.%d: %s may be unsupported",
                 family, row ? row : l->version, high / 10, high % 10, gpu_label(gp, gl, sizeof gl));
        if (!c->fix) gc_check_fix(c, "Check the CUDA build of this %s against its support matrix for CC %d.%d.", family, gp->cc / 10, gp->cc % 10);
      }
    }
  }
  /* Copies of the same library and major further down the path. */
  for (size_t j = i + 1; j < h->n_libs; j++) {
    const gc_lib *o = &h->libs[j];
    if (o->shadowed_by != (int)i) continue;
    int differs = strcmp(o->version, l->version) != 0;
    snprintf(detail + strlen(detail), sizeof detail - strlen(detail), "; also on the path, not used: %s (%s)", o->path,
             o->version[0] ? o->version : "?");
    if (differs && c->verdict < GC_WARN) {
      c->verdict = GC_WARN;
      char dir[GC_PROBE_PATH];
      gc_check_fix(c, "Two different lib%s %d.x are on the loader path; programs built against %s may load %s. Remove %s from "
                      "LD_LIBRARY_PATH or uninstall the copy you do not want.",
                   l->name, l->v.major, o->version, l->version, dir_of(o->link, dir, sizeof dir));
    }
  }
  /* cuDNN 9's sub-libraries must be the same release as libcudnn. */
  if (!strcmp(l->name, "cudnn"))
    for (size_t j = 0; j < h->n_libs; j++) {
      const gc_lib *o = &h->libs[j];
      if (strncmp(o->name, "cudnn_", 6) || o->shadowed_by >= 0 || o->v.major != l->v.major || !strcmp(o->version, l->version)) continue;
      snprintf(detail + strlen(detail), sizeof detail - strlen(detail), "; lib%s is %s, not %s", o->name, o->version, l->version);
      if (c->verdict < GC_WARN) c->verdict = GC_WARN;
      if (!c->fix) gc_check_fix(c, "Install one cuDNN release completely: its sub-libraries of another release fail at load or give wrong results.");
    }
  gc_check_detail(c, "%s", detail);
  json_t *d = json_object();
  json_object_set_new(d, "path", json_string(l->path));
  json_object_set_new(d, "version", l->version[0] ? json_string(l->version) : json_null());
  if (rc >= 0) json_object_set_new(d, "driver_rule", json_integer(rc));
  c->data = d;
}

static void section_libraries(gc_report *r, host *h) {
  gc_section *s = gc_section_add(r, "Libraries");
  int shown = 0;
  for (size_t i = 0; i < h->n_libs; i++) {
    const gc_lib *l = &h->libs[i];
    if (l->shadowed_by >= 0 || !strncmp(l->name, "cudnn_", 6)) continue;
    check_lib(s, h, i);
    shown++;
  }
  if (!shown)
    gc_check_add(s, GC_INFO, "lib.none", "No CUDA runtime libraries on the loader path (%zu directories searched); programs that "
                                         "bundle their own (PyTorch wheels, conda environments) are not seen here", h->ld.n);
}

/* ------------------------------------------------------------------- Ember --- */

static void section_ember(gc_report *r, host *h) {
  gc_section *s = gc_section_add(r, "Ember");
  if (!h->have_drv) {
    gc_check_add(s, GC_INFO, "ember.plan", "Ember's dispatch plans not computed: %s",
                 h->root ? "--root without EMBER_LIBCUDA has no driver to plan for" : "no driver");
    return;
  }
  if (h->drv.state != EM_DRIVER_OK || !h->n_gpus) {
    gc_check *c = gc_check_add(s, GC_INFO, "ember.plan", "Ember runs on the CPU here");
    gc_check_detail(c, "%s", h->drv.message);
    return;
  }
  size_t n_mod = 0;
  if (em_module_count(&n_mod) != EM_OK) n_mod = 0;
  for (size_t g = 0; g < h->n_gpus; g++) {
    const hgpu *gp = &h->gpus[g];
    char id[32], title[400] = "", detail[4000] = "", gl[320];
    gc_verdict worst = GC_OK;
    int counts[6] = {0};
    const char *cpu_reason = NULL;
    em_plan *plan = malloc(sizeof *plan); /* large: keep it off the stack */
    if (!plan) return;
    for (size_t m = 0; m < n_mod; m++) {
      const char *name = NULL;
      if (em_module_name(m, &name) != EM_OK || !name) continue;
      if (em_dispatch_plan(em_cuda(gp->index), name, plan) != EM_OK) {
        snprintf(detail + strlen(detail), sizeof detail - strlen(detail), "%s%s: no plan (%s)", detail[0] ? "; " : "", name, em_last_error());
        if (worst < GC_WARN) worst = GC_WARN;
        continue;
      }
      if ((unsigned)plan->path <= 5) counts[plan->path]++;
      snprintf(detail + strlen(detail), sizeof detail - strlen(detail), "%s%s: %s (%s)", detail[0] ? "; " : "", name,
               em_path_name(plan->path), plan->reason);
      gc_verdict v = plan->strict_error ? GC_FAIL : plan->path == EM_PATH_CPU || plan->path == EM_PATH_NONE ? GC_WARN : GC_OK;
      if (v > worst) worst = v;
      if (plan->path == EM_PATH_CPU && !cpu_reason) cpu_reason = name;
    }
    free(plan);
    for (int p = 1; p <= 5; p++)
      if (counts[p])
        snprintf(title + strlen(title), sizeof title - strlen(title), "%s%d %s", title[0] ? ", " : "", counts[p], em_path_name((em_path)p));
    snprintf(id, sizeof id, "ember.gpu%d", gp->index);
    gc_check *c = gc_check_add(s, worst, id, "%s: %zu kernel module%s: %s", gpu_label(gp, gl, sizeof gl), n_mod, n_mod == 1 ? "" : "s",
                               title[0] ? title : "none");
    gc_check_detail(c, "%s", detail);
    if (worst == GC_FAIL) gc_check_fix(c, "EMBER_STRICT=1 refuses these fallbacks: unset it, or make a GPU path possible (see the reasons).");
    else if (worst == GC_WARN)
      gc_check_fix(c, "Module '%s' falls back to the CPU; the reasons say which image or library is missing (a newer driver, or an "
                      "NVRTC library, libnvrtc.so.N, usually enables a GPU path). EMBER_LOG=dispatch shows every candidate.",
                   cpu_reason ? cpu_reason : "?");
  }
}

/* ------------------------------------------------------------------- facts --- */

static json_t *str_or_null(const char *s) { return s && *s ? json_string(s) : json_null(); }

static void facts(gc_report *r, host *h, const char *require_cuda) {
  json_t *f = r->facts;
  char name[256] = "";
  if (h->live) {
    if (gethostname(name, sizeof name - 1)) name[0] = '\0';
  } else if (gc_probe_read(h->root, "/etc/hostname", name, sizeof name) > 0) {
    name[strcspn(name, "\r\n \t")] = '\0';
  } else {
    name[0] = '\0';
  }
  json_object_set_new(f, "hostname", str_or_null(name));
  json_object_set_new(f, "root", json_string(h->root ? h->root : "/"));

  json_t *d = json_object();
  json_object_set_new(d, "kernel_module", h->kmod.found ? json_string(h->kmod.v.text) : json_null());
  json_object_set_new(d, "kernel_module_source", h->kmod.found ? json_string(h->kmod.source) : json_null());
  json_object_set_new(d, "kernel_module_l4t", json_boolean(h->kmod.found && h->kmod.l4t));
  json_object_set_new(d, "libcuda_path", str_or_null(h->cuda.path));
  json_object_set_new(d, "libcuda_kind", json_string(gc_probe_libcuda_kind_name(h->cuda.kind)));
  json_object_set_new(d, "libcuda_version", str_or_null(h->cuda.version));
  json_object_set_new(d, "cuda", h->cuda_version ? json_integer(h->cuda_version) : json_null());
  json_object_set_new(d, "cuda_estimated", json_boolean(h->cuda_estimated));
  json_object_set_new(d, "cuda_source", str_or_null(h->cuda_source));
  /* state: Ember's measurement; a file-level prediction of 803/804 when no
   * real driver was asked (--root), or when there was no measurement at all. */
  const char *state;
  int predicted = 0, err = 0;
  if (h->have_drv && h->live) {
    state = state_name(h->drv.state);
    err = h->drv.cuda_error;
  } else if (h->cuda.kind == GC_LIBCUDA_NONE) {
    state = "not-found", predicted = !h->have_drv;
  } else if (h->cuda.kind == GC_LIBCUDA_STUB) {
    state = "stub", err = 34, predicted = !h->have_drv;
  } else if (h->predicted) {
    state = "init-failed", err = h->predicted, predicted = 1;
  } else if (h->have_drv) {
    state = state_name(h->drv.state);
    err = h->drv.cuda_error;
  } else {
    predicted = 1;
    state = !h->kmod.found && h->ct.wsl != 2 ? "init-failed" : !h->n_proc && h->ct.wsl != 2 ? "no-device" : "ok";
  }
  json_object_set_new(d, "state", json_string(state));
  json_object_set_new(d, "state_predicted", json_boolean(predicted));
  json_object_set_new(d, "cuda_error", err ? json_integer(err) : json_null());
  json_object_set_new(f, "driver", d);

  json_t *gs = json_array();
  for (size_t i = 0; i < h->n_gpus; i++) {
    const hgpu *g = &h->gpus[i];
    json_t *o = json_object();
    char cc[16];
    snprintf(cc, sizeof cc, "%d.%d", g->cc / 10, g->cc % 10);
    json_object_set_new(o, "index", json_integer(g->index));
    json_object_set_new(o, "name", str_or_null(g->name));
    json_object_set_new(o, "cc", g->cc ? json_string(cc) : json_null());
    json_object_set_new(o, "cc_estimated", json_boolean(g->cc_estimated));
    json_object_set_new(o, "arch", g->cc ? json_string(em_arch_name(g->cc)) : json_null());
    json_object_set_new(o, "uuid", str_or_null(g->uuid));
    json_object_set_new(o, "pci", str_or_null(g->pci));
    json_object_set_new(o, "memory_bytes", g->mem ? json_integer((json_int_t)g->mem) : json_null());
    json_object_set_new(o, "mig", g->mig < 0 ? json_null() : json_boolean(g->mig == 1));
    json_object_set_new(o, "brand", g->brand >= 0 ? json_string(gc_probe_brand_name(g->brand)) : json_null());
    json_object_set_new(o, "source", json_string(h->gpus_from_cuda ? "cuda" : "proc"));
    json_array_append_new(gs, o);
  }
  json_object_set_new(f, "gpus", gs);
  json_object_set_new(f, "physical_gpus", json_integer((json_int_t)h->n_proc));

  json_t *c = json_object();
  json_object_set_new(c, "inside", json_boolean(h->ct.inside));
  json_object_set_new(c, "runtime", str_or_null(h->ct.runtime));
  json_object_set_new(c, "device_nodes", json_boolean(h->ct.wsl == 2 ? h->ct.dxg : h->ct.nvidiactl && h->ct.n_dev_gpus));
  json_object_set_new(c, "require_cuda", str_or_null(require_cuda));
  json_object_set_new(c, "nvidia_visible_devices", str_or_null(getenv("NVIDIA_VISIBLE_DEVICES")));
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  json_object_set_new(c, "cuda_visible_devices", cvd ? json_string(cvd) : json_null());
  json_object_set_new(c, "wsl", h->ct.wsl ? json_integer(h->ct.wsl) : json_null());
  json_object_set_new(f, "container", c);

  json_t *ls = json_array();
  for (size_t i = 0; i < h->n_libs; i++) {
    const gc_lib *l = &h->libs[i];
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(l->name));
    json_object_set_new(o, "path", json_string(l->path));
    json_object_set_new(o, "version", str_or_null(l->version));
    json_object_set_new(o, "link", json_string(l->link));
    json_object_set_new(o, "shadowed", json_boolean(l->shadowed_by >= 0));
    json_array_append_new(ls, o);
  }
  json_object_set_new(f, "libraries", ls);
}

/* ----------------------------------------------------------------- command --- */

int gc_cmd_host(int argc, char **argv, const gc_opts *o, gc_report **out) {
  *out = NULL;
  for (int i = 1; i < argc; i++) {
    fprintf(stderr, "gpucheck host: unexpected argument '%s' (host takes only --json, --no-color, --root DIR)\n", argv[i]);
    return GC_EXIT_USAGE;
  }
  const char *root = o && o->root && *o->root && strcmp(o->root, "/") ? o->root : NULL;
  if (root) {
    struct stat st;
    if (stat(root, &st) || !S_ISDIR(st.st_mode)) {
      fprintf(stderr, "gpucheck: --root %s: not a directory\n", root);
      return GC_EXIT_USAGE;
    }
  }
  host *h = calloc(1, sizeof *h);
  gc_report *r = gc_report_new("host");
  if (!h || !r) {
    free(h);
    gc_report_free(r);
    fprintf(stderr, "gpucheck: out of memory\n");
    return GC_EXIT_INTERNAL;
  }
  h->root = root;
  h->live = !root;
  const char *el = getenv("EMBER_LIBCUDA");
  h->ember_libcuda = el && *el ? el : NULL;
  gather(h);
  char require_cuda[512];
  section_driver(r, h);
  section_gpus(r, h);
  section_container(r, h, require_cuda, sizeof require_cuda);
  section_libraries(r, h);
  section_ember(r, h);
  facts(r, h, require_cuda);
  free(h);
  *out = r;
  return 0;
}
