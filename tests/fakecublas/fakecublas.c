/* Fake libcublas: a test double of cuBLAS (the v2 API) for machines without
 * a GPU. Ember loads it with EMBER_LIBCUBLAS=<path>, beside the libcuda
 * double (tests/fakecuda): it finds that driver as the real library does,
 * keeps its products in the driver's device memory and runs them as work on
 * the handle's stream (fakecublas_gemm.c), with the arithmetic and the
 * reduced precisions cuBLAS may use done honestly (README.md).
 *
 * This file: the lock and the rules every call obeys (configuration, fault
 * injection, call counters), finding the driver, handles and their state
 * (stream, workspace, math and pointer modes), versions, status texts and
 * the test hooks. */
#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecublas_internal.h"

#define MAX_RULES 64
#define HANDLE_BASE ((uintptr_t)0xcb1a5000000ull) /* handle values: synthetic, never reused */
#define HANDLE_STEP ((uintptr_t)0x100)

/* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR (cuda.h). */
#define ATTR_CC_MAJOR 75
#define ATTR_CC_MINOR 76
/* CU_POINTER_ATTRIBUTE_CONTEXT, _RANGE_START_ADDR, _RANGE_SIZE (cuda.h). */
#define PTR_ATTR_CONTEXT 1
#define PTR_ATTR_RANGE_START 11
#define PTR_ATTR_RANGE_SIZE 12

typedef struct fcb_rule {
  fcb_entry entry;
  cublasStatus_t status;
  unsigned long nth; /* 0: every call; N: only the N-th (1-based) */
} fcb_rule;

typedef struct fcb_handle {
  uintptr_t id; /* the value handed out as cublasHandle_t */
  fcb_handle_state st;
} fcb_handle;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static struct {
  int configured;     /* a configuration was read (well-formed or not) */
  int config_ok;
  char *snapshot;     /* the variables it was read from */
  char config_error[256];
  fcb_version version;
  int n_rules;
  fcb_rule rules[MAX_RULES];
  unsigned long counters[FCB_N_ENTRIES];
  fcb_handle **handles;
  size_t n_handles, cap_handles;
  uintptr_t next_serial;
  char last_product[1024];
  char last_error[512];
} S;

static const char *const entry_names[FCB_N_ENTRIES] = {
#define FCB_NAME(name) #name,
    FCB_ENTRY_LIST(FCB_NAME)
#undef FCB_NAME
};

const char *fcb_entry_name(fcb_entry e) { return (unsigned)e < FCB_N_ENTRIES ? entry_names[e] : "?"; }

static int entry_lookup(const char *name, size_t len, fcb_entry *out) {
  for (int i = 0; i < FCB_N_ENTRIES; i++)
    if (strlen(entry_names[i]) == len && memcmp(entry_names[i], name, len) == 0) {
      *out = (fcb_entry)i;
      return 0;
    }
  return -1;
}

/* ----------------------------------------------------- configuration --- */

static int set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int set_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(S.config_error, sizeof S.config_error, fmt, ap);
  va_end(ap);
  return -1;
}

static void trim(const char **b, const char **e) {
  while (*b < *e && isspace((unsigned char)**b)) (*b)++;
  while (*e > *b && isspace((unsigned char)(*e)[-1])) (*e)--;
}

/* A decimal number of 1 to max_digits digits from [*p, end). */
static int read_uint(const char **p, const char *end, int max_digits, unsigned long *out) {
  unsigned long v = 0;
  int digits = 0;
  while (*p < end && isdigit((unsigned char)**p)) {
    if (++digits > max_digits) return -1;
    v = v * 10 + (unsigned long)(**p - '0');
    (*p)++;
  }
  *out = v;
  return digits ? 0 : -1;
}

/* FAKECUBLAS_VERSION: "major.minor.patch" of a cuBLAS the double can be:
 * the majors of libcublas.so.11, .12 and .13 (README.md). */
static int parse_version(const char *s) {
  S.version = (fcb_version){13, 1, 0}; /* CUDA 13.0's cuBLAS (cublas_api.h: CUBLAS_VER_MAJOR 13, MINOR 1, PATCH 0) */
  if (!s) return 0;
  const char *p = s, *e = s + strlen(s);
  trim(&p, &e);
  unsigned long v[3];
  for (int i = 0; i < 3; i++) {
    if (read_uint(&p, e, 2, &v[i]) != 0 || (i < 2 && (p >= e || *p++ != '.')))
      return set_error("FAKECUBLAS_VERSION: '%s' is not major.minor.patch (e.g. 13.1.0)", s);
  }
  if (p != e) return set_error("FAKECUBLAS_VERSION: '%s': unexpected text after the patch level", s);
  if (v[0] < 11 || v[0] > 13)
    return set_error("FAKECUBLAS_VERSION: '%s': the double is cuBLAS 11, 12 or 13 (libcublas.so.11/.12/.13)", s);
  S.version = (fcb_version){(int)v[0], (int)v[1], (int)v[2]};
  return 0;
}

/* One FAKECUBLAS_FAIL item: "name=status" or "name=status@N". */
static int parse_rule(const char *b, const char *e, fcb_rule *r) {
  int len = (int)(e - b);
  const char *eq = memchr(b, '=', (size_t)(e - b));
  if (!eq) return set_error("FAKECUBLAS_FAIL: '%.*s' is not name=status[@N]", len, b);
  const char *nb = b, *ne = eq;
  trim(&nb, &ne);
  if (entry_lookup(nb, (size_t)(ne - nb), &r->entry) != 0)
    return set_error("FAKECUBLAS_FAIL: '%.*s' is not an entry point of the double (see README.md)", (int)(ne - nb), nb);
  if (r->entry == FCB_cublasGetStatusName || r->entry == FCB_cublasGetStatusString)
    return set_error("FAKECUBLAS_FAIL: '%.*s' returns text, not a status: it cannot fail", (int)(ne - nb), nb);
  const char *p = eq + 1, *pe = e;
  trim(&p, &pe);
  unsigned long status, nth = 0;
  if (read_uint(&p, pe, 4, &status) != 0 || status == 0)
    return set_error("FAKECUBLAS_FAIL: '%.*s': the status must be a non-zero cublasStatus_t number", len, b);
  if (p < pe && *p == '@') {
    p++;
    if (read_uint(&p, pe, 9, &nth) != 0 || nth == 0)
      return set_error("FAKECUBLAS_FAIL: '%.*s': the call number after '@' must be 1 or more", len, b);
  }
  if (p != pe) return set_error("FAKECUBLAS_FAIL: '%.*s': unexpected text after the status", len, b);
  r->status = (cublasStatus_t)status;
  r->nth = nth;
  return 0;
}

static int parse_rules(const char *s) {
  S.n_rules = 0;
  if (!s) return 0;
  const char *all_b = s, *all_e = s + strlen(s);
  trim(&all_b, &all_e);
  for (const char *b = all_b; b < all_e;) {
    const char *e = memchr(b, ',', (size_t)(all_e - b));
    if (!e) e = all_e;
    if (S.n_rules == MAX_RULES) return set_error("FAKECUBLAS_FAIL: more than %d rules", MAX_RULES);
    if (parse_rule(b, e, &S.rules[S.n_rules]) != 0) return -1;
    S.n_rules++;
    b = e + 1;
    if (e < all_e && b == all_e) return set_error("FAKECUBLAS_FAIL: '%s' ends with a comma", s);
  }
  return 0;
}

/* The variables the configuration is read from, as one text ('!' marks an
 * unset variable, so unset and empty differ). */
static char *config_snapshot(void) {
  const char *v = getenv("FAKECUBLAS_VERSION"), *f = getenv("FAKECUBLAS_FAIL");
  size_t n = 64 + (v ? strlen(v) : 0) + (f ? strlen(f) : 0);
  char *s = malloc(n);
  if (s) snprintf(s, n, "V%c%s\nF%c%s", v ? '=' : '!', v ? v : "", f ? '=' : '!', f ? f : "");
  return s;
}

/* With the lock held: reads the environment afresh; counters restart. A
 * malformed value is said once on stderr. */
static void configure(char *snapshot) {
  free(S.snapshot);
  S.snapshot = snapshot;
  S.configured = 1;
  S.config_error[0] = '\0';
  memset(S.counters, 0, sizeof S.counters);
  S.config_ok = parse_version(getenv("FAKECUBLAS_VERSION")) == 0 && parse_rules(getenv("FAKECUBLAS_FAIL")) == 0;
  if (!S.config_ok) {
    S.n_rules = 0;
    fprintf(stderr, "fakecublas: %s\n", S.config_error);
  }
}

/* With the lock held: the first call after loading or fakecublas_reset
 * reads the configuration. */
static void ensure_configured(void) {
  if (S.configured) return;
  char *snap = config_snapshot();
  if (snap) configure(snap);
}

/* cublasCreate_v2 reads the environment again when it changed since the
 * configuration in force, as cuInit does in the libcuda double. */
static void refresh_configuration(void) {
  char *snap = config_snapshot();
  pthread_mutex_lock(&lock);
  if (snap && (!S.configured || strcmp(snap, S.snapshot) != 0))
    configure(snap);
  else
    free(snap);
  pthread_mutex_unlock(&lock);
}

/* ------------------------------------------------------------ guard --- */

/* With the lock held: what fakecublas_last_error() will say. */
static void note_refusal(const char *fmt, va_list ap) { vsnprintf(S.last_error, sizeof S.last_error, fmt, ap); }

cublasStatus_t fcb_refuse(cublasStatus_t st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&lock);
  note_refusal(fmt, ap);
  pthread_mutex_unlock(&lock);
  va_end(ap);
  return st;
}

static cublasStatus_t refuse_held(cublasStatus_t st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static cublasStatus_t refuse_held(cublasStatus_t st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  note_refusal(fmt, ap);
  va_end(ap);
  return st;
}

cublasStatus_t fcb_enter(fcb_entry e, fcb_version *v) {
  pthread_mutex_lock(&lock);
  ensure_configured();
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  if (!S.config_ok) {
    st = refuse_held(CUBLAS_STATUS_NOT_INITIALIZED, "%s: the configuration is malformed: %s", fcb_entry_name(e),
                     S.configured ? S.config_error : "out of memory");
  } else {
    unsigned long n = ++S.counters[e];
    for (int i = 0; i < S.n_rules && st == CUBLAS_STATUS_SUCCESS; i++) {
      const fcb_rule *r = &S.rules[i];
      if (r->entry == e && (r->nth == 0 || r->nth == n))
        st = refuse_held(r->status, "%s: call %lu failed by FAKECUBLAS_FAIL", fcb_entry_name(e), n);
    }
    if (v) *v = S.version;
  }
  pthread_mutex_unlock(&lock);
  return st;
}

/* Counts a call that cannot fail (the status texts). */
static void count_only(fcb_entry e) {
  pthread_mutex_lock(&lock);
  ensure_configured();
  if (S.config_ok) S.counters[e]++;
  pthread_mutex_unlock(&lock);
}

/* ----------------------------------------------------------- driver --- */

static void *driver_symbol(void *lib, const char *name, int *missing) {
  void *p = dlsym(lib, name);
  if (!p) *missing = 1;
  return p;
}

/* The loaded libcuda, found as the real library finds the driver: by its
 * soname, already loaded (the double never loads a driver itself). */
static cublasStatus_t bind_driver(fcb_driver *d) {
  memset(d, 0, sizeof *d);
  d->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!d->lib)
    return fcb_refuse(CUBLAS_STATUS_NOT_INITIALIZED,
                      "cublasCreate_v2: no libcuda.so.1 is loaded (the double uses the loaded libcuda double)");
  int missing = 0;
  *(void **)&d->ctx_get_current = driver_symbol(d->lib, "cuCtxGetCurrent", &missing);
  *(void **)&d->ctx_get_device = driver_symbol(d->lib, "cuCtxGetDevice", &missing);
  *(void **)&d->ctx_synchronize = driver_symbol(d->lib, "cuCtxSynchronize", &missing);
  *(void **)&d->device_attribute = driver_symbol(d->lib, "cuDeviceGetAttribute", &missing);
  *(void **)&d->driver_version = driver_symbol(d->lib, "cuDriverGetVersion", &missing);
  *(void **)&d->pointer_attribute = driver_symbol(d->lib, "cuPointerGetAttribute", &missing);
  *(void **)&d->enqueue_work = driver_symbol(d->lib, "fakecuda_enqueue_work", &missing);
  *(void **)&d->device_span = driver_symbol(d->lib, "fakecuda_device_span", &missing);
  if (missing) {
    dlclose(d->lib);
    d->lib = NULL;
    return fcb_refuse(CUBLAS_STATUS_NOT_INITIALIZED,
                      "cublasCreate_v2: the loaded libcuda.so.1 is not the libcuda double (tests/fakecuda) with the "
                      "hooks for library doubles");
  }
  return CUBLAS_STATUS_SUCCESS;
}

/* The context current now, its device and compute capability; a driver
 * too old for this cuBLAS major fails as the CUDA runtime's initialization
 * inside cublasCreate does (README.md). */
static cublasStatus_t read_device(fcb_handle_state *hs, const fcb_version *v) {
  const fcb_driver *d = &hs->drv;
  int driver = 0, major = 0, minor = 0;
  CUresult r = d->driver_version(&driver);
  if (r != CUDA_SUCCESS)
    return fcb_refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasCreate_v2: cuDriverGetVersion failed (%d)", (int)r);
  if (driver < v->major * 1000)
    return fcb_refuse(CUBLAS_STATUS_NOT_INITIALIZED,
                      "cublasCreate_v2: cuBLAS %d.%d.%d needs a CUDA %d.0 driver or newer; this one is CUDA %d.%d",
                      v->major, v->minor, v->patch, v->major, driver / 1000, driver % 1000 / 10);
  r = d->ctx_get_current(&hs->ctx);
  if (r != CUDA_SUCCESS || !hs->ctx)
    return fcb_refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasCreate_v2: no current CUDA context (%d)", (int)r);
  r = d->ctx_get_device(&hs->device);
  if (r == CUDA_SUCCESS) r = d->device_attribute(&major, ATTR_CC_MAJOR, hs->device);
  if (r == CUDA_SUCCESS) r = d->device_attribute(&minor, ATTR_CC_MINOR, hs->device);
  if (r != CUDA_SUCCESS)
    return fcb_refuse(CUBLAS_STATUS_NOT_INITIALIZED,
                      "cublasCreate_v2: the current context's device and compute capability are unknown (%d)", (int)r);
  hs->cc = major * 10 + minor;
  return CUBLAS_STATUS_SUCCESS;
}

/* ---------------------------------------------------------- handles --- */

/* With the lock held: the live handle h, or NULL. */
static fcb_handle *find_handle(cublasHandle_t h) {
  for (size_t i = 0; i < S.n_handles; i++)
    if (S.handles[i]->id == (uintptr_t)h) return S.handles[i];
  return NULL;
}

/* With the lock held: the live handle h, or NULL with the refusal noted. */
static fcb_handle *live_handle(cublasHandle_t h, const char *entry) {
  fcb_handle *x = h ? find_handle(h) : NULL;
  if (!x) refuse_held(CUBLAS_STATUS_NOT_INITIALIZED, "%s: %s", entry, h ? "not a live handle (destroyed?)" : "handle is NULL");
  return x;
}

cublasStatus_t fcb_handle_get(cublasHandle_t h, const char *entry, fcb_handle_state *out) {
  pthread_mutex_lock(&lock);
  fcb_handle *x = live_handle(h, entry);
  if (x) *out = x->st;
  pthread_mutex_unlock(&lock);
  return x ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

static cublasStatus_t add_handle(const fcb_handle_state *hs, cublasHandle_t *out) {
  fcb_handle *x = malloc(sizeof *x);
  pthread_mutex_lock(&lock);
  if (x && S.n_handles == S.cap_handles) {
    size_t cap = S.cap_handles ? 2 * S.cap_handles : 8;
    fcb_handle **grown = realloc(S.handles, cap * sizeof *grown);
    if (grown) S.handles = grown, S.cap_handles = cap;
  }
  int ok = x && S.n_handles < S.cap_handles;
  if (ok) {
    x->id = HANDLE_BASE + HANDLE_STEP * S.next_serial++;
    x->st = *hs;
    S.handles[S.n_handles++] = x;
    *out = (cublasHandle_t)x->id;
  }
  pthread_mutex_unlock(&lock);
  if (!ok) free(x);
  return ok ? CUBLAS_STATUS_SUCCESS
            : fcb_refuse(CUBLAS_STATUS_ALLOC_FAILED, "cublasCreate_v2: out of host memory for the handle");
}

/* The handle is made for the context current now (cuBLAS documentation,
 * cublasCreate: the handle is tied to the current device). */
FCB_EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
  refresh_configuration();
  fcb_version v;
  cublasStatus_t st = fcb_enter(FCB_cublasCreate_v2, &v);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (!handle) return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasCreate_v2: handle is NULL");
  fcb_handle_state hs;
  memset(&hs, 0, sizeof hs);
  st = bind_driver(&hs.drv);
  if (st == CUBLAS_STATUS_SUCCESS) st = read_device(&hs, &v);
  if (st == CUBLAS_STATUS_SUCCESS) st = add_handle(&hs, handle);
  if (st != CUBLAS_STATUS_SUCCESS && hs.drv.lib) dlclose(hs.drv.lib);
  return st;
}

/* Destroying a handle synchronizes the device (cuBLAS documentation,
 * cublasCreate: "the release of those resources by calling cublasDestroy()
 * will implicitly call cudaDeviceSynchronize()"): the double synchronizes
 * the handle's context when it is current [U: otherwise nothing], and drops
 * its reference on the driver. */
FCB_EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  cublasStatus_t st = fcb_enter(FCB_cublasDestroy_v2, NULL);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  pthread_mutex_lock(&lock);
  fcb_handle *x = live_handle(handle, "cublasDestroy_v2");
  for (size_t i = 0; x && i < S.n_handles; i++)
    if (S.handles[i] == x) S.handles[i] = S.handles[--S.n_handles];
  pthread_mutex_unlock(&lock);
  if (!x) return CUBLAS_STATUS_NOT_INITIALIZED;
  CUcontext cur = NULL;
  if (x->st.drv.ctx_get_current(&cur) == CUDA_SUCCESS && cur == x->st.ctx) x->st.drv.ctx_synchronize();
  dlclose(x->st.drv.lib);
  free(x);
  return CUBLAS_STATUS_SUCCESS;
}

/* Runs set(handle's state, arg) under the lock for a live handle. */
typedef cublasStatus_t (*state_fn)(fcb_handle_state *hs, const void *arg, const char *entry);

static cublasStatus_t with_handle(fcb_entry e, cublasHandle_t h, state_fn fn, const void *arg) {
  cublasStatus_t st = fcb_enter(e, NULL);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  pthread_mutex_lock(&lock);
  fcb_handle *x = live_handle(h, fcb_entry_name(e));
  st = x ? fn(&x->st, arg, fcb_entry_name(e)) : CUBLAS_STATUS_NOT_INITIALIZED;
  pthread_mutex_unlock(&lock);
  return st;
}

/* cuBLAS documentation, cublasSetStream: the stream is not checked here (a
 * bad one fails the next product's launch), and "this function
 * unconditionally resets the cuBLAS library workspace back to the default
 * workspace pool". */
static cublasStatus_t set_stream(fcb_handle_state *hs, const void *arg, const char *entry) {
  (void)entry;
  hs->stream = *(const CUstream *)arg;
  hs->workspace = 0;
  hs->workspace_bytes = 0;
  return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t get_stream(fcb_handle_state *hs, const void *arg, const char *entry) {
  CUstream *out = *(CUstream *const *)arg;
  if (!out) return refuse_held(CUBLAS_STATUS_INVALID_VALUE, "%s: streamId is NULL", entry); /* [U] */
  *out = hs->stream;
  return CUBLAS_STATUS_SUCCESS;
}

FCB_EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, CUstream stream) {
  return with_handle(FCB_cublasSetStream_v2, handle, set_stream, &stream);
}

FCB_EXPORT cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, CUstream *stream) {
  return with_handle(FCB_cublasGetStream_v2, handle, get_stream, &stream);
}

/* Whether [p, p + bytes) is device memory of the handle's context, asked of
 * the driver (cuPointerGetAttribute) at the call [U: what real cuBLAS checks
 * beyond the alignment is not documented; a buffer of another context or too
 * small would fault in a later kernel, and the double says so here]. */
static int workspace_is_context_memory(const fcb_handle_state *hs, CUdeviceptr p, size_t bytes) {
  CUcontext owner = NULL;
  CUdeviceptr start = 0;
  size_t size = 0;
  if (hs->drv.pointer_attribute(&owner, PTR_ATTR_CONTEXT, p) != CUDA_SUCCESS || owner != hs->ctx) return 0;
  if (hs->drv.pointer_attribute(&start, PTR_ATTR_RANGE_START, p) != CUDA_SUCCESS) return 0;
  if (hs->drv.pointer_attribute(&size, PTR_ATTR_RANGE_SIZE, p) != CUDA_SUCCESS) return 0;
  return bytes <= size - (size_t)(p - start);
}

/* cuBLAS documentation, cublasSetWorkspace: "the workspace pointer has to be
 * aligned to at least 256 bytes, otherwise CUBLAS_STATUS_INVALID_VALUE";
 * a size of 0 is allowed and keeps the default pool from being used. The
 * driver is asked without the double's lock, on a copy of the handle's
 * state; the workspace is stored afterwards. */
FCB_EXPORT cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t bytes) {
  const char *entry = "cublasSetWorkspace_v2";
  CUdeviceptr p = (CUdeviceptr)(uintptr_t)workspace;
  cublasStatus_t st = fcb_enter(FCB_cublasSetWorkspace_v2, NULL);
  fcb_handle_state hs;
  if (st == CUBLAS_STATUS_SUCCESS) st = fcb_handle_get(handle, entry, &hs);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (p % 256u != 0)
    return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: the workspace 0x%llx is not aligned to 256 bytes", entry, p);
  if (bytes > 0 && !workspace_is_context_memory(&hs, p, bytes))
    return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE,
                      "%s: %zu bytes at 0x%llx are not device memory of the handle's context (in one allocation)",
                      entry, bytes, p);
  pthread_mutex_lock(&lock);
  fcb_handle *x = live_handle(handle, entry);
  if (x) x->st.workspace = p, x->st.workspace_bytes = bytes;
  pthread_mutex_unlock(&lock);
  return x ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

/* The cublasMath_t values of cublas_api.h (CUDA 13.0), each optionally
 * with CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION; anything else is
 * CUBLAS_STATUS_INVALID_VALUE [U], under every FAKECUBLAS_VERSION [U]. */
static cublasStatus_t set_math(fcb_handle_state *hs, const void *arg, const char *entry) {
  int mode = *(const int *)arg, base = mode & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  int known = base == CUBLAS_DEFAULT_MATH || base == CUBLAS_TENSOR_OP_MATH || base == CUBLAS_PEDANTIC_MATH ||
              base == CUBLAS_TF32_TENSOR_OP_MATH || base == CUBLAS_FP32_EMULATED_BF16X9_MATH ||
              base == CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH;
  if (!known) return refuse_held(CUBLAS_STATUS_INVALID_VALUE, "%s: %d is not a cublasMath_t", entry, mode);
  hs->math_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t get_math(fcb_handle_state *hs, const void *arg, const char *entry) {
  int *out = *(int *const *)arg;
  if (!out) return refuse_held(CUBLAS_STATUS_INVALID_VALUE, "%s: mode is NULL", entry); /* [U] */
  *out = hs->math_mode;
  return CUBLAS_STATUS_SUCCESS;
}

FCB_EXPORT cublasStatus_t cublasSetMathMode(cublasHandle_t handle, int mode) {
  return with_handle(FCB_cublasSetMathMode, handle, set_math, &mode);
}

FCB_EXPORT cublasStatus_t cublasGetMathMode(cublasHandle_t handle, int *mode) {
  return with_handle(FCB_cublasGetMathMode, handle, get_math, &mode);
}

static cublasStatus_t set_pointer_mode(fcb_handle_state *hs, const void *arg, const char *entry) {
  int mode = *(const int *)arg;
  if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE)
    return refuse_held(CUBLAS_STATUS_INVALID_VALUE, "%s: %d is not a cublasPointerMode_t", entry, mode); /* [U] */
  hs->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t get_pointer_mode(fcb_handle_state *hs, const void *arg, const char *entry) {
  int *out = *(int *const *)arg;
  if (!out) return refuse_held(CUBLAS_STATUS_INVALID_VALUE, "%s: mode is NULL", entry); /* [U] */
  *out = hs->pointer_mode;
  return CUBLAS_STATUS_SUCCESS;
}

FCB_EXPORT cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, int mode) {
  return with_handle(FCB_cublasSetPointerMode_v2, handle, set_pointer_mode, &mode);
}

FCB_EXPORT cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, int *mode) {
  return with_handle(FCB_cublasGetPointerMode_v2, handle, get_pointer_mode, &mode);
}

/* ---------------------------------------------------------- version --- */

/* cuBLAS documentation, cublasGetProperty: INVALID_VALUE "if type value is
 * invalid or value == NULL". Needs no handle. */
FCB_EXPORT cublasStatus_t cublasGetProperty(int type, int *value) {
  fcb_version v;
  cublasStatus_t st = fcb_enter(FCB_cublasGetProperty, &v);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (!value) return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasGetProperty: value is NULL");
  switch (type) {
  case MAJOR_VERSION: *value = v.major; return CUBLAS_STATUS_SUCCESS;
  case MINOR_VERSION: *value = v.minor; return CUBLAS_STATUS_SUCCESS;
  case PATCH_LEVEL: *value = v.patch; return CUBLAS_STATUS_SUCCESS;
  default: return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasGetProperty: %d is not a libraryPropertyType", type);
  }
}

/* The number cublasGetVersion gives is the release's CUBLAS_VERSION:
 * major * 10000 + minor * 100 + patch in cublas_api.h of CUDA 13.0 and of
 * cuBLAS 11.9.2 [S: a copy of that header], major * 1000 + minor * 100 +
 * patch in cuBLAS 11.6.5 and 11.7.4 [S: copies of their headers]. Between
 * them (11.8) the double takes the newer rule [U]. */
static int version_number(const fcb_version *v) {
  int newer_rule = v->major > 11 || v->minor >= 8;
  return v->major * (newer_rule ? 10000 : 1000) + v->minor * 100 + v->patch;
}

/* cuBLAS documentation, cublasGetVersion: NOT_INITIALIZED when "the provided
 * storage for library version number is not initialized (NULL)". The
 * handle is not looked at [U]. */
FCB_EXPORT cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int *version) {
  (void)handle;
  fcb_version v;
  cublasStatus_t st = fcb_enter(FCB_cublasGetVersion_v2, &v);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (!version) return fcb_refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasGetVersion_v2: version is NULL");
  *version = version_number(&v);
  return CUBLAS_STATUS_SUCCESS;
}

/* -------------------------------------------------------- status text --- */

/* Names as cublas_api.h spells them; texts as CUDA 13.0's libcublasLt.so.13
 * holds them for the same statuses (checked LOCAL with `strings`, in the
 * order of the names), "unrecognized status" for any other number [U: that
 * libcublas answers with the same texts]. */
static const struct {
  cublasStatus_t status;
  const char *name, *text;
} status_table[] = {
    {CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS", "success"},
    {CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED", "the library was not initialized"},
    {CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED", "the resource allocation failed"},
    {CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE",
     "an unsupported value or parameter was passed to the function"},
    {CUBLAS_STATUS_ARCH_MISMATCH, "CUBLAS_STATUS_ARCH_MISMATCH",
     "the function requires an architectural feature absent from the device"},
    {CUBLAS_STATUS_MAPPING_ERROR, "CUBLAS_STATUS_MAPPING_ERROR", "an access to GPU memory space failed"},
    {CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED", "the function failed to launch on the GPU"},
    {CUBLAS_STATUS_INTERNAL_ERROR, "CUBLAS_STATUS_INTERNAL_ERROR", "an internal operation failed"},
    {CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED", "the requested functionality is not supported"},
    {CUBLAS_STATUS_LICENSE_ERROR, "CUBLAS_STATUS_LICENSE_ERROR", "the license check failed"},
};

static const char *status_text(cublasStatus_t st, int name) {
  for (size_t i = 0; i < sizeof status_table / sizeof status_table[0]; i++)
    if (status_table[i].status == st) return name ? status_table[i].name : status_table[i].text;
  return "unrecognized status";
}

FCB_EXPORT const char *cublasGetStatusName(cublasStatus_t status) {
  count_only(FCB_cublasGetStatusName);
  return status_text(status, 1);
}

FCB_EXPORT const char *cublasGetStatusString(cublasStatus_t status) {
  count_only(FCB_cublasGetStatusString);
  return status_text(status, 0);
}

/* ------------------------------------------------------------- notes --- */

void fcb_note_product(const char *text) {
  pthread_mutex_lock(&lock);
  snprintf(S.last_product, sizeof S.last_product, "%s", text);
  pthread_mutex_unlock(&lock);
}

/* --------------------------------------------------------- test hooks --- */

FCB_HOOK unsigned long fakecublas_call_count(const char *name) {
  fcb_entry e;
  unsigned long n = 0;
  pthread_mutex_lock(&lock);
  if (name && entry_lookup(name, strlen(name), &e) == 0) n = S.counters[e];
  pthread_mutex_unlock(&lock);
  return n;
}

FCB_HOOK void fakecublas_reset(void) {
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < S.n_handles; i++) {
    dlclose(S.handles[i]->st.drv.lib);
    free(S.handles[i]);
  }
  free(S.handles);
  free(S.snapshot);
  memset(&S, 0, sizeof S);
  pthread_mutex_unlock(&lock);
}

static const char *copy_for_caller(const char *text) {
  static _Thread_local char copy[1024];
  pthread_mutex_lock(&lock);
  snprintf(copy, sizeof copy, "%s", text);
  pthread_mutex_unlock(&lock);
  return copy;
}

FCB_HOOK const char *fakecublas_last_gemm(void) { return copy_for_caller(S.last_product); }

FCB_HOOK const char *fakecublas_last_error(void) { return copy_for_caller(S.last_error); }

FCB_HOOK size_t fakecublas_live_handles(void) {
  pthread_mutex_lock(&lock);
  size_t n = S.n_handles;
  pthread_mutex_unlock(&lock);
  return n;
}

/* The hooks have the types fakecublas.h gives the tests. */
#define FCB_SAME_TYPE(fn, type) _Static_assert(__builtin_types_compatible_p(__typeof__(&fn), type), #fn)
FCB_SAME_TYPE(fakecublas_call_count, fakecublas_call_count_fn);
FCB_SAME_TYPE(fakecublas_reset, fakecublas_reset_fn);
FCB_SAME_TYPE(fakecublas_last_gemm, fakecublas_text_fn);
FCB_SAME_TYPE(fakecublas_last_error, fakecublas_text_fn);
FCB_SAME_TYPE(fakecublas_live_handles, fakecublas_live_handles_fn);
