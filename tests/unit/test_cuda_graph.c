/* runtime/cuda_graph.c on the libcuda test double: whether a device can
 * capture and why not (a CUDA 9.2 driver exports no capture entry point),
 * a capture replayed with one cuGraphLaunch, a capture invalidated by a
 * forbidden call reported with the rule, the legacy stream refused, and the
 * CUDA 10.0 entry point without a mode used where it is the only one. */
#include <dlfcn.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cmocka.h needs setjmp.h, stdarg.h and stddef.h first. */
#include <cmocka.h>

#include "cuda_graph.h"
#include "ember/runtime.h"
#include "fakecuda/fakecuda.h"
#include "runtime.h"

static struct {
  void *handle;
  char real[PATH_MAX];
  fakecuda_reset_fn reset;
  fakecuda_call_count_fn calls;
} fk;

static const char *const managed_vars[] = {"EMBER_LIBCUDA", "EMBER_STRICT", "EMBER_FORCE", "FAKECUDA_DEVICES",
                                           "FAKECUDA_DRIVER", "FAKECUDA_FAIL", "CUDA_VISIBLE_DEVICES"};

static int group_setup(void **state) {
  (void)state;
  const char *lib = getenv("FAKECUDA_LIB");
  if (!lib || !*lib) {
    fprintf(stderr, "test_cuda_graph: FAKECUDA_LIB is not set: skipping every test\n");
    return 0;
  }
  if (!realpath(lib, fk.real) || !(fk.handle = dlopen(fk.real, RTLD_NOW | RTLD_LOCAL))) {
    fprintf(stderr, "test_cuda_graph: cannot load %s\n", lib);
    return -1;
  }
  *(void **)&fk.reset = dlsym(fk.handle, "fakecuda_reset");
  *(void **)&fk.calls = dlsym(fk.handle, "fakecuda_call_count");
  return fk.reset && fk.calls ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  em_shutdown();
  if (fk.handle) fk.reset();
  return 0;
}

/* A new process lifetime on the double: one H100 and the given driver. */
static void configure(const char *driver) {
  em_shutdown();
  for (size_t i = 0; i < sizeof managed_vars / sizeof managed_vars[0]; i++) unsetenv(managed_vars[i]);
  setenv("EMBER_LIBCUDA", fk.real, 1);
  setenv("FAKECUDA_DEVICES", "9.0", 1);
  if (driver) setenv("FAKECUDA_DRIVER", driver, 1);
  fk.reset();
}

#define NEED_FAKE()         \
  do {                      \
    if (!fk.handle) skip(); \
  } while (0)

#define assert_contains(msg, s)                                                                              \
  do {                                                                                                       \
    const char *m_ = (msg), *s_ = (s);                                                                       \
    if (!strstr(m_, s_)) fail_msg("expected \"%s\" in \"%s\"", s_, m_);                                      \
  } while (0)

static void support_and_why_not(void **state) {
  (void)state;
  NEED_FAKE();
  char why[512];
  configure("9020");
  assert_int_equal(em_cuda_graph_supported(em_cuda(0), why, sizeof why), 0);
  assert_contains(why, "the driver (CUDA 9.2) has no stream capture: cuStreamBeginCapture needs CUDA 10.0");
  em_stream *s;
  assert_int_equal(em_stream_create(em_cuda(0), &s), EM_OK);
  assert_int_equal(em_cuda_graph_begin(em_cuda(0), s), EM_ERR_UNSUPPORTED);
  assert_contains(em_last_error(), "CUDA 9.2");
  em_stream_destroy(s);
  assert_int_equal(em_cuda_graph_supported(em_cpu(), why, sizeof why), 0);
  assert_contains(why, "need a CUDA device");
  configure(NULL);
  assert_int_equal(em_cuda_graph_supported(em_cuda(0), why, sizeof why), 1);
}

/* A captured device-to-device copy is replayed on each launch, reading what
 * the source holds then; the capture itself copies nothing. */
static void capture_and_replay(void **state) {
  (void)state;
  NEED_FAKE();
  configure(NULL);
  em_device dev = em_cuda(0);
  em_stream *s;
  assert_int_equal(em_stream_create(dev, &s), EM_OK);
  enum { N = 32 };
  float host[N], got[N];
  void *src, *dst;
  assert_int_equal(em_malloc(dev, sizeof host, &src), EM_OK);
  assert_int_equal(em_malloc(dev, sizeof host, &dst), EM_OK);
  for (int i = 0; i < N; i++) host[i] = (float)i;
  assert_int_equal(em_memcpy_h2d(dev, src, host, sizeof host, NULL), EM_OK);
  assert_int_equal(em_memcpy_h2d(dev, dst, host, sizeof host, NULL), EM_OK);

  assert_int_equal(em_cuda_graph_begin(dev, s), EM_OK);
  assert_int_equal(em_memcpy_d2d(dev, dst, src, sizeof host, s), EM_OK);
  em_cuda_graph *g = NULL;
  assert_int_equal(em_cuda_graph_end(dev, s, &g), EM_OK);
  assert_non_null(g);
  assert_int_equal(fk.calls("cuStreamBeginCapture_v2"), 1);
  long launches = (long)fk.calls("cuGraphLaunch");
  for (int round = 1; round <= 2; round++) {
    for (int i = 0; i < N; i++) host[i] = (float)(i * 10 * round);
    assert_int_equal(em_memcpy_h2d(dev, src, host, sizeof host, NULL), EM_OK);
    assert_int_equal(em_cuda_graph_launch(g, s), EM_OK);
    assert_int_equal(em_stream_sync(dev, s), EM_OK);
    assert_int_equal(em_memcpy_d2h(dev, got, dst, sizeof got, NULL), EM_OK);
    assert_memory_equal(got, host, sizeof got);
  }
  assert_int_equal((long)fk.calls("cuGraphLaunch"), launches + 2);
  em_cuda_graph_free(g);

  /* A pageable copy into the capture invalidates it: the end says so, and
   * the stream works eagerly afterwards. */
  assert_int_equal(em_cuda_graph_begin(dev, s), EM_OK);
  assert_int_equal(em_memcpy_h2d(dev, dst, host, sizeof host, s), EM_ERR_CUDA);
  assert_contains(em_last_error(), "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED");
  assert_int_equal(em_cuda_graph_end(dev, s, &g), EM_ERR_UNSUPPORTED);
  assert_null(g);
  assert_contains(em_last_error(), "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901)");
  assert_int_equal(em_memcpy_h2d(dev, dst, host, sizeof host, s), EM_OK);
  assert_int_equal(em_stream_sync(dev, s), EM_OK);

  /* The legacy default stream cannot capture. */
  assert_int_equal(em_cuda_graph_begin(dev, NULL), EM_ERR_INVALID_ARGUMENT);
  assert_contains(em_last_error(), "legacy default stream");
  em_free(dev, src);
  em_free(dev, dst);
  em_stream_destroy(s);
}

/* A CUDA 10.0 driver: its capture has no mode (GLOBAL only, which fails
 * other threads' allocations while it runs), so Ember does not capture
 * there, and says why. */
static void cuda_10_0_entry_points(void **state) {
  (void)state;
  NEED_FAKE();
  configure("10000");
  em_device dev = em_cuda(0);
  char why[512];
  assert_int_equal(em_cuda_graph_supported(dev, why, sizeof why), 0);
  assert_contains(why, "GLOBAL");
  assert_contains(why, "CUDA 10.1");
  em_stream *s;
  assert_int_equal(em_stream_create(dev, &s), EM_OK);
  assert_int_equal(em_cuda_graph_begin(dev, s), EM_ERR_UNSUPPORTED);
  assert_int_equal(fk.calls("cuStreamBeginCapture"), 0);
  em_stream_destroy(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(support_and_why_not),
      cmocka_unit_test(capture_and_replay),
      cmocka_unit_test(cuda_10_0_entry_points),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
