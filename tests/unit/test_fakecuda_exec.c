/* The test double of libcuda runs kernels (tests/fakecuda/README.md,
 * "Running kernels"): results, geometry, barriers and shared memory, the
 * ordering of streams, events and the legacy default stream, and each class
 * of mistake it exists to catch: a write out of bounds, a missing barrier, a
 * host pointer, a freed buffer, another GPU's buffer, a launch larger than
 * the device allows, barrier divergence, a result read before synchronising.
 *
 * The kernels are tests/fakecuda/test_kernels.cu (and the fixture images'
 * fc_fill / fc_axpy). Expected values are computed here from what each
 * kernel is specified to do, never read back from the double. */
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cmocka.h needs setjmp.h, stdarg.h and stddef.h first. */
#include <cmocka.h>

#include "fake_driver.h"

/* ------------------------------------------------------------ helpers --- */

/* A PTX module that declares the given entries: the double binds each to
 * its host build (the bodies do not matter to it). */
static CUmodule load_entries(const char *const *names, int n) {
  char text[4096];
  int len = snprintf(text, sizeof text, ".version 6.0\n.target sm_50\n.address_size 64\n");
  for (int i = 0; i < n; i++)
    len += snprintf(text + len, sizeof text - (size_t)len, ".visible .entry %s()\n{\n\tret;\n}\n", names[i]);
  CUmodule m = NULL;
  assert_int_equal(fk.ModuleLoadData(&m, text), CUDA_SUCCESS);
  return m;
}

static CUfunction function(CUmodule m, const char *name) {
  CUfunction f = NULL;
  assert_int_equal(fk.ModuleGetFunction(&f, m, name), CUDA_SUCCESS);
  return f;
}

/* One fake GPU of CC 7.5, its context current, and a module with `entry`. */
static CUfunction one_kernel(const char *entry) {
  assert_int_equal(fake_init_with("7.5", NULL), CUDA_SUCCESS);
  fake_use_device(0);
  const char *names[] = {entry};
  return function(load_entries(names, 1), entry);
}

static CUdeviceptr dev_alloc(size_t bytes) {
  CUdeviceptr p = 0;
  assert_int_equal(fk.MemAlloc(&p, bytes), CUDA_SUCCESS);
  return p;
}

static CUresult launch1(CUfunction f, unsigned grid, unsigned block, unsigned shmem, CUstream s, void **args) {
  return fk.LaunchKernel(f, grid, 1, 1, block, 1, 1, shmem, s, args, NULL);
}

static int contains(const char *text, const char *part) { return text && strstr(text, part) != NULL; }

#define ASSERT_LAST_ERROR_HAS(part)                                                                   \
  do {                                                                                                \
    if (!contains(fk.last_error(), part)) fail_msg("last error \"%s\" lacks \"%s\"", fk.last_error(), part); \
  } while (0)

/* ----------------------------------------------------------- results --- */

/* The fixture cubin's fc_fill and fc_axpy, run through the double: the
 * kernel's own arithmetic (a rounded product, then the add) done here. */
static void fixture_kernels_compute(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("7.5", NULL), CUDA_SUCCESS);
  fake_use_device(0);
  fake_blob b = fake_fixture("k.sm_75.cubin");
  CUmodule m;
  assert_int_equal(fk.ModuleLoadData(&m, b.data), CUDA_SUCCESS);
  free(b.data);
  enum { N = 1000 };
  float x[N], y[N], got[N];
  for (int i = 0; i < N; i++) x[i] = (float)i * 0.37f - 50.0f, y[i] = 1.0f / (float)(i + 1);
  CUdeviceptr dx = dev_alloc(sizeof x), dy = dev_alloc(sizeof y);
  assert_int_equal(fk.MemcpyHtoD(dx, x, sizeof x), CUDA_SUCCESS);
  float v = 3.25f, a = -1.5f;
  int n = N;
  void *fill_args[] = {&dy, &v, &n}, *axpy_args[] = {&a, &dx, &dy, &n};
  assert_int_equal(launch1(function(m, "fc_fill"), 4, 256, 0, NULL, fill_args), CUDA_SUCCESS);
  assert_int_equal(launch1(function(m, "fc_axpy"), 4, 256, 0, NULL, axpy_args), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoH(got, dy, sizeof got), CUDA_SUCCESS);
  for (int i = 0; i < N; i++) {
    volatile float p = a * x[i];
    float want = p + 3.25f;
    assert_memory_equal(&got[i], &want, sizeof want);
  }
  (void)y;
}

/* Only what the loaded image declares can be called, even though the double
 * has a host build of every kernel it knows. */
static void functions_come_from_the_image(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("7.5", NULL), CUDA_SUCCESS);
  fake_use_device(0);
  const char *names[] = {"fc_test_copy"};
  CUmodule m = load_entries(names, 1);
  CUfunction f;
  assert_int_equal(fk.ModuleGetFunction(&f, m, "fc_test_copy"), CUDA_SUCCESS);
  assert_int_equal(fk.ModuleGetFunction(&f, m, "fc_test_geometry"), CUDA_ERROR_NOT_FOUND);
  assert_int_equal(fk.ModuleGetFunction(&f, m, "em_fill_f32"), CUDA_ERROR_NOT_FOUND);
  /* A kernel the image has and the double has no host build of: found, but
   * its launch is refused with a message. */
  const char *other[] = {"not_a_kernel_of_ember"};
  CUmodule m2 = load_entries(other, 1);
  assert_int_equal(fk.ModuleGetFunction(&f, m2, "not_a_kernel_of_ember"), CUDA_SUCCESS);
  assert_int_equal(fk.LaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_NOT_SUPPORTED);
  ASSERT_LAST_ERROR_HAS("no host build");
}

/* A 3-D grid of 3-D blocks: every thread sees its own coordinates. */
static void geometry_in_three_dimensions(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_test_geometry");
  const unsigned g[3] = {3, 2, 2}, bl[3] = {4, 3, 2};
  size_t threads = (size_t)g[0] * g[1] * g[2] * bl[0] * bl[1] * bl[2];
  int *got = malloc(threads * 12 * sizeof *got);
  CUdeviceptr out = dev_alloc(threads * 12 * sizeof *got);
  void *args[] = {&out};
  assert_int_equal(fk.LaunchKernel(f, g[0], g[1], g[2], bl[0], bl[1], bl[2], 0, NULL, args, NULL), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoH(got, out, threads * 12 * sizeof *got), CUDA_SUCCESS);
  size_t k = 0;
  for (unsigned bz = 0; bz < g[2]; bz++)
    for (unsigned by = 0; by < g[1]; by++)
      for (unsigned bx = 0; bx < g[0]; bx++)
        for (unsigned tz = 0; tz < bl[2]; tz++)
          for (unsigned ty = 0; ty < bl[1]; ty++)
            for (unsigned tx = 0; tx < bl[0]; tx++, k++) {
              const int want[12] = {(int)tx, (int)ty, (int)tz, (int)bx,    (int)by,    (int)bz,
                                    (int)bl[0], (int)bl[1], (int)bl[2], (int)g[0], (int)g[1], (int)g[2]};
              assert_memory_equal(&got[k * 12], want, sizeof want);
            }
  free(got);
}

/* ------------------------------------------------ barriers and shared --- */

enum { REV_BLOCK = 256, REV_BLOCKS = 3, REV_N = REV_BLOCK * REV_BLOCKS };

static void reverse_input(float *in) {
  for (int i = 0; i < REV_N; i++) in[i] = (float)i;
}

/* Element i of a per-block reversal. */
static float reversed(int i, int block) { return (float)(i / block * block + (block - 1 - i % block)); }

/* Runs fc_test_block_reverse under one seed; returns how many outputs are wrong. */
static int block_reverse_errors(CUfunction f, unsigned long long seed, int use_barrier) {
  float in[REV_N], got[REV_N];
  reverse_input(in);
  CUdeviceptr din = dev_alloc(sizeof in), dout = dev_alloc(sizeof got);
  assert_int_equal(fk.MemcpyHtoD(din, in, sizeof in), CUDA_SUCCESS);
  fk.set_seed(seed);
  void *args[] = {&din, &dout, &use_barrier};
  assert_int_equal(launch1(f, REV_BLOCKS, REV_BLOCK, 0, NULL, args), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoH(got, dout, sizeof got), CUDA_SUCCESS);
  int wrong = 0;
  for (int i = 0; i < REV_N; i++) wrong += got[i] != reversed(i, REV_BLOCK);
  assert_int_equal(fk.MemFree(din), CUDA_SUCCESS);
  assert_int_equal(fk.MemFree(dout), CUDA_SUCCESS);
  return wrong;
}

static void barrier_makes_shared_exchange_right(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_test_block_reverse");
  for (unsigned long long seed = 1; seed <= 5; seed++) assert_int_equal(block_reverse_errors(f, seed, 1), 0);
}

/* Without the barrier, a thread reads its mirror's slot before the mirror
 * wrote it whenever the mirror runs later: wrong under every seed (each of
 * the 128 pairs per block gets it right with probability 1/2). */
static void missing_barrier_gives_wrong_results(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_test_block_reverse");
  for (unsigned long long seed = 1; seed <= 5; seed++) {
    int wrong = block_reverse_errors(f, seed, 0);
    if (wrong == 0) fail_msg("seed %llu: a missing barrier went unnoticed", seed);
  }
}

/* Dynamic shared memory of the launch's size, a barrier inside a helper
 * called in a loop: three rounds of reversal leave each block reversed. */
static void dynamic_shared_and_barriers_in_helpers(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_test_dynamic_reverse");
  enum { B = 128, G = 4, N = B * G };
  float in[N], got[N];
  for (int i = 0; i < N; i++) in[i] = (float)i;
  CUdeviceptr din = dev_alloc(sizeof in), dout = dev_alloc(sizeof got);
  assert_int_equal(fk.MemcpyHtoD(din, in, sizeof in), CUDA_SUCCESS);
  for (int rounds = 2; rounds <= 3; rounds++) {
    void *args[] = {&din, &dout, &rounds};
    assert_int_equal(launch1(f, G, B, B * sizeof(float), NULL, args), CUDA_SUCCESS);
    assert_int_equal(fk.MemcpyDtoH(got, dout, sizeof got), CUDA_SUCCESS);
    for (int i = 0; i < N; i++) assert_true(got[i] == (rounds % 2 ? reversed(i, B) : (float)i));
  }
}

/* Threads returning while others wait at a barrier: undefined on a GPU, a
 * launch failure here, reported at the synchronisation with its reason, and
 * the context stays unusable until it is released (as after a device fault). */
static void barrier_divergence_fails_the_launch(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_test_barrier_divergence");
  CUdeviceptr y = dev_alloc(64 * sizeof(float));
  void *args[] = {&y};
  assert_int_equal(launch1(f, 1, 64, 0, NULL, args), CUDA_SUCCESS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_ERROR_LAUNCH_FAILED);
  ASSERT_LAST_ERROR_HAS("fc_test_barrier_divergence");
  ASSERT_LAST_ERROR_HAS("barrier divergence");
  CUdeviceptr p;
  assert_int_equal(fk.MemAlloc(&p, 16), CUDA_ERROR_LAUNCH_FAILED);
  assert_int_equal(fk.PrimaryCtxRelease(0), CUDA_SUCCESS);
  fake_use_device(0); /* a fresh context works */
  assert_int_equal(fk.MemAlloc(&p, 16), CUDA_SUCCESS);
}

/* ------------------------------------------------------------ memory --- */

static void write_out_of_bounds_is_caught(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("7.5", NULL), CUDA_SUCCESS);
  fake_use_device(0);
  const char *names[] = {"fc_test_write_past_end", "fc_test_write_before_start"};
  CUmodule m = load_entries(names, 2);
  int n = 100;
  CUdeviceptr y = dev_alloc((size_t)n * sizeof(float));
  void *args[] = {&y, &n};
  assert_int_equal(launch1(function(m, "fc_test_write_past_end"), 1, 32, 0, NULL, args), CUDA_SUCCESS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_LAST_ERROR_HAS("fc_test_write_past_end, parameter 0 (y)");
  ASSERT_LAST_ERROR_HAS("past the end");
  /* The context is unusable until released, as after a real fault. */
  CUdeviceptr p;
  assert_int_equal(fk.MemAlloc(&p, 16), CUDA_ERROR_ILLEGAL_ADDRESS);
  assert_int_equal(fk.PrimaryCtxRelease(0), CUDA_SUCCESS);
  fake_use_device(0);
  m = load_entries(names, 2);
  y = dev_alloc((size_t)n * sizeof(float));
  void *args2[] = {&y};
  assert_int_equal(launch1(function(m, "fc_test_write_before_start"), 1, 32, 0, NULL, args2), CUDA_SUCCESS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_LAST_ERROR_HAS("before the start");
}

/* Addresses a kernel reads from a table in device memory (EM_DEVICE_ADDR):
 * good ones reach the buffers; a freed buffer's, a host pointer or a count
 * past a buffer's end fail the launch when it runs with
 * CUDA_ERROR_ILLEGAL_ADDRESS and a message naming the kernel, the entry
 * and why, and the context keeps the error, as after a real fault. */
static CUfunction table_kernel(void) {
  assert_int_equal(fake_init_with("7.5", NULL), CUDA_SUCCESS);
  fake_use_device(0);
  const char *names[] = {"fc_test_table_fill"};
  return function(load_entries(names, 1), "fc_test_table_fill");
}

/* Uploads the table {a0, n0, a1, n1} and launches two blocks over it. */
static CUresult table_launch(CUfunction f, CUdeviceptr tab, long long a0, long long n0, long long a1, long long n1) {
  long long t[4] = {a0, n0, a1, n1};
  assert_int_equal(fk.MemcpyHtoD(tab, t, sizeof t), CUDA_SUCCESS);
  void *args[] = {&tab};
  assert_int_equal(launch1(f, 2, 32, 0, NULL, args), CUDA_SUCCESS); /* the table is read when the kernel runs */
  return fk.CtxSynchronize();
}

/* The context after a fault: released, and a fresh one with the kernel. */
static CUfunction table_kernel_again(void) {
  assert_int_equal(fk.PrimaryCtxRelease(0), CUDA_SUCCESS);
  CUcontext c;
  assert_int_equal(fk.CtxPopCurrent(&c), CUDA_SUCCESS);
  return table_kernel();
}

static void addresses_read_from_a_table(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = table_kernel();
  enum { N0 = 100, N1 = 37 };
  CUdeviceptr tab = dev_alloc(4 * sizeof(long long)), y0 = dev_alloc(N0 * sizeof(float));
  CUdeviceptr y1 = dev_alloc(N1 * sizeof(float));
  assert_int_equal(table_launch(f, tab, (long long)y0, N0, (long long)y1, N1), CUDA_SUCCESS);
  float got0[N0], got1[N1];
  assert_int_equal(fk.MemcpyDtoH(got0, y0, sizeof got0), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoH(got1, y1, sizeof got1), CUDA_SUCCESS);
  for (int i = 0; i < N0; i++) assert_true(got0[i] == 1.0f);
  for (int i = 0; i < N1; i++) assert_true(got1[i] == 2.0f);

  /* a freed buffer's address: entry 2 (byte 16 of the table) */
  assert_int_equal(fk.MemFree(y1), CUDA_SUCCESS);
  assert_int_equal(table_launch(f, tab, (long long)y0, N0, (long long)y1, N1), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_LAST_ERROR_HAS("kernel fc_test_table_fill, block (1,0,0)");
  ASSERT_LAST_ERROR_HAS("read from the table entry at byte 16 of parameter 0 (tab)");
  ASSERT_LAST_ERROR_HAS("freed memory");
  CUdeviceptr p;
  assert_int_equal(fk.MemAlloc(&p, 16), CUDA_ERROR_ILLEGAL_ADDRESS); /* the context keeps the fault */

  /* a host pointer: entry 0 */
  f = table_kernel_again();
  tab = dev_alloc(4 * sizeof(long long)), y0 = dev_alloc(N0 * sizeof(float));
  float host[N0];
  assert_int_equal(table_launch(f, tab, (long long)(uintptr_t)host, N0, (long long)y0, N0),
                   CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_LAST_ERROR_HAS("read from the table entry at byte 0 of parameter 0 (tab)");
  ASSERT_LAST_ERROR_HAS("not device memory");

  /* a count one past the buffer: the guard zone behind the address shows the write */
  f = table_kernel_again();
  tab = dev_alloc(4 * sizeof(long long)), y0 = dev_alloc(N0 * sizeof(float)), y1 = dev_alloc(N1 * sizeof(float));
  assert_int_equal(table_launch(f, tab, (long long)y0, N0, (long long)y1, N1 + 1), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_LAST_ERROR_HAS("kernel fc_test_table_fill, device address");
  ASSERT_LAST_ERROR_HAS("(EM_DEVICE_ADDR): wrote past the end");

  /* and the stacks of the stopped threads are reused: a good launch runs */
  f = table_kernel_again();
  tab = dev_alloc(4 * sizeof(long long)), y0 = dev_alloc(N0 * sizeof(float)), y1 = dev_alloc(N1 * sizeof(float));
  assert_int_equal(table_launch(f, tab, (long long)y0, N0, (long long)y1, N1), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoH(got1, y1, sizeof got1), CUDA_SUCCESS);
  for (int i = 0; i < N1; i++) assert_true(got1[i] == 2.0f);
}

/* More table entries: an address inside a buffer (past its start) reaches
 * that element; another GPU's buffer fails the launch naming that device;
 * a thread that reads a bad entry while the rest of its block waits at a
 * barrier fails the launch as a fault (CUDA_ERROR_ILLEGAL_ADDRESS naming
 * the entry), not as barrier divergence, the context keeps the fault, and
 * a fresh context runs the kernel with good entries. */
static void table_entries_inside_across_and_at_barriers(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = table_kernel();
  enum { N0 = 100, N1 = 37 };
  CUdeviceptr tab = dev_alloc(4 * sizeof(long long)), y0 = dev_alloc(N0 * sizeof(float));
  CUdeviceptr y1 = dev_alloc(N1 * sizeof(float));
  assert_int_equal(table_launch(f, tab, (long long)(y0 + 4 * sizeof(float)), N0 - 4, (long long)y1, N1),
                   CUDA_SUCCESS);
  float got0[N0];
  assert_int_equal(fk.MemcpyDtoH(got0, y0, sizeof got0), CUDA_SUCCESS);
  for (int i = 0; i < 4; i++) assert_false(got0[i] == 1.0f); /* before the address: untouched */
  for (int i = 4; i < N0; i++) assert_true(got0[i] == 1.0f);

  /* another GPU's buffer */
  assert_int_equal(fk.PrimaryCtxRelease(0), CUDA_SUCCESS);
  CUcontext c;
  assert_int_equal(fk.CtxPopCurrent(&c), CUDA_SUCCESS);
  assert_int_equal(fake_init_with("7.5,8.6", NULL), CUDA_SUCCESS);
  fake_use_device(1);
  CUdeviceptr on_1 = dev_alloc(N1 * sizeof(float));
  assert_int_equal(fk.CtxPopCurrent(&c), CUDA_SUCCESS);
  fake_use_device(0);
  const char *names[] = {"fc_test_table_fill", "fc_test_table_fault_at_barrier"};
  CUmodule m = load_entries(names, 2);
  f = function(m, names[0]);
  tab = dev_alloc(4 * sizeof(long long)), y0 = dev_alloc(N0 * sizeof(float));
  assert_int_equal(table_launch(f, tab, (long long)y0, N0, (long long)on_1, N1), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_LAST_ERROR_HAS("read from the table entry at byte 16 of parameter 0 (tab)");
  ASSERT_LAST_ERROR_HAS("memory of CUDA device 1");

  /* a fault while the others wait at a barrier: the last of 64 threads reads a freed buffer's address */
  assert_int_equal(fk.PrimaryCtxRelease(0), CUDA_SUCCESS);
  assert_int_equal(fk.CtxPopCurrent(&c), CUDA_SUCCESS);
  fake_use_device(0);
  m = load_entries(names, 2);
  CUfunction g = function(m, names[1]);
  tab = dev_alloc(2 * sizeof(long long));
  CUdeviceptr gone = dev_alloc(16), y = dev_alloc(64 * sizeof(float));
  assert_int_equal(fk.MemFree(gone), CUDA_SUCCESS);
  long long t[2] = {(long long)gone, (long long)y};
  assert_int_equal(fk.MemcpyHtoD(tab, t, sizeof t), CUDA_SUCCESS);
  void *args[] = {&tab};
  assert_int_equal(launch1(g, 1, 64, 0, NULL, args), CUDA_SUCCESS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_LAST_ERROR_HAS("kernel fc_test_table_fault_at_barrier, block (0,0,0)");
  ASSERT_LAST_ERROR_HAS("thread (63,0,0)");
  ASSERT_LAST_ERROR_HAS("freed memory");
  assert_int_equal(launch1(g, 1, 64, 0, NULL, args), CUDA_ERROR_ILLEGAL_ADDRESS); /* the context keeps it */

  /* a fresh context: good entries, every thread through both barriers */
  assert_int_equal(fk.PrimaryCtxRelease(0), CUDA_SUCCESS);
  assert_int_equal(fk.CtxPopCurrent(&c), CUDA_SUCCESS);
  fake_use_device(0);
  m = load_entries(names, 2);
  g = function(m, names[1]);
  tab = dev_alloc(2 * sizeof(long long)), y = dev_alloc(64 * sizeof(float));
  CUdeviceptr one = dev_alloc(sizeof(float));
  long long t2[2] = {(long long)one, (long long)y};
  assert_int_equal(fk.MemcpyHtoD(tab, t2, sizeof t2), CUDA_SUCCESS);
  assert_int_equal(launch1(g, 1, 64, 0, NULL, args), CUDA_SUCCESS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_SUCCESS);
  float got[64], v1;
  assert_int_equal(fk.MemcpyDtoH(got, y, sizeof got), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoH(&v1, one, sizeof v1), CUDA_SUCCESS);
  for (int i = 0; i < 64; i++) assert_true(got[i] == (float)i);
  assert_true(v1 == 1.0f);
}

static void host_pointer_is_refused(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_fill");
  float host[32];
  float *hp = host, v = 1.0f;
  int n = 32;
  void *args[] = {&hp, &v, &n};
  assert_int_equal(launch1(f, 1, 32, 0, NULL, args), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_LAST_ERROR_HAS("kernel fc_fill: parameter 0 (y)");
  ASSERT_LAST_ERROR_HAS("not device memory");
  assert_int_equal(fk.launch_count(), 0);
  /* Refused at the launch, where the mistake is: the context goes on. */
  CUdeviceptr ok = dev_alloc(sizeof host);
  void *good[] = {&ok, &v, &n};
  assert_int_equal(launch1(f, 1, 32, 0, NULL, good), CUDA_SUCCESS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_SUCCESS);
}

/* Mapped pinned host memory (cuMemHostAlloc with DEVICEMAP): a kernel writes
 * it through the device address cuMemHostGetDevicePointer gives, and the host
 * reads the bytes where they are once the kernel ran, no copy made. The
 * device address is checked like device memory: inside the allocation (an
 * interior host pointer maps to the same offset), not past it, not after
 * cuMemFreeHost; the host address itself is still refused in a launch. */
static void mapped_host_memory(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_fill");
  int attr = -1;
  assert_int_equal(fk.DeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 0), CUDA_SUCCESS);
  assert_int_equal(attr, 1);
  assert_int_equal(fk.DeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 0), CUDA_SUCCESS);
  assert_int_equal(attr, 1);
  enum { N = 64 };
  void *hv = NULL, *plain = NULL;
  assert_int_equal(fk.MemHostAlloc(&hv, N * sizeof(float), CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
  assert_int_equal(fk.MemHostAlloc(&plain, 64, 0), CUDA_SUCCESS);
  assert_int_equal(fk.pinned_allocations(), 2);
  assert_int_equal(fk.live_allocations(), 0); /* host memory: no device allocation */
  float *h = hv;
  for (int i = 0; i < N; i++) h[i] = -1.0f; /* the host writes it directly */
  CUdeviceptr d = 0, inner = 0;
  assert_int_equal(fk.MemHostGetDevicePointer(&d, h, 0), CUDA_SUCCESS);
  assert_true(d != 0 && d != (CUdeviceptr)(uintptr_t)h);
  assert_int_equal(fk.MemHostGetDevicePointer(&inner, h + 16, 0), CUDA_SUCCESS);
  assert_true(inner == d + 16 * sizeof(float));
  /* Refused: flags (must be 0), memory allocated without DEVICEMAP, memory not pinned. */
  CUdeviceptr bad = 0;
  float local[4];
  assert_int_equal(fk.MemHostGetDevicePointer(&bad, h, 1), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(fk.MemHostGetDevicePointer(&bad, plain, 0), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(fk.MemHostGetDevicePointer(&bad, local, 0), CUDA_ERROR_INVALID_VALUE);

  /* A kernel fills the last 48 floats through the interior device address. */
  float v = 2.5f;
  int n = N - 16;
  void *args[] = {&inner, &v, &n};
  assert_int_equal(launch1(f, 1, N, 0, NULL, args), CUDA_SUCCESS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_SUCCESS);
  for (int i = 0; i < N; i++) assert_true(h[i] == (i < 16 ? -1.0f : 2.5f));

  /* Past the mapping, and the host address itself: refused at the launch. */
  CUdeviceptr past = d + N * sizeof(float) + 256;
  void *past_args[] = {&past, &v, &n};
  assert_int_equal(launch1(f, 1, 1, 0, NULL, past_args), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_LAST_ERROR_HAS("no mapped host allocation");
  float *hp = h;
  void *host_args[] = {&hp, &v, &n};
  assert_int_equal(launch1(f, 1, 1, 0, NULL, host_args), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_LAST_ERROR_HAS("not device memory");

  /* cuMemFreeHost takes the start only; then the device address is dead. */
  assert_int_equal(fk.MemFreeHost(h + 1), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(fk.MemFreeHost(h), CUDA_SUCCESS);
  assert_int_equal(fk.MemFreeHost(plain), CUDA_SUCCESS);
  assert_int_equal(fk.pinned_allocations(), 0);
  assert_int_equal(launch1(f, 1, 1, 0, NULL, args), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_LAST_ERROR_HAS("freed memory");
  assert_int_equal(fk.CtxSynchronize(), CUDA_SUCCESS);
}

/* FAKECUDA_NO_MAP_HOST: a device without canMapHostMemory. Pinned memory
 * still allocates, DEVICEMAP included (cuda.h: "the failure is deferred to
 * cuMemHostGetDevicePointer()"); it has no device address. */
static void device_that_cannot_map_host_memory(void **state) {
  (void)state;
  FAKE_NEED();
  fake_set("FAKECUDA_NO_MAP_HOST", "1");
  assert_int_equal(fake_init_with("7.5", NULL), CUDA_SUCCESS);
  fake_use_device(0);
  int attr = -1;
  assert_int_equal(fk.DeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 0), CUDA_SUCCESS);
  assert_int_equal(attr, 0);
  void *h = NULL;
  CUdeviceptr d = 0;
  assert_int_equal(fk.MemHostAlloc(&h, 256, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
  assert_int_equal(fk.MemHostGetDevicePointer(&d, h, 0), CUDA_ERROR_INVALID_VALUE); /* cuda.h: the failure is deferred here */
  assert_int_equal(fk.MemFreeHost(h), CUDA_SUCCESS);
}

static void freed_buffer_is_refused(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_fill");
  CUdeviceptr y = dev_alloc(128);
  assert_int_equal(fk.MemFree(y), CUDA_SUCCESS);
  float v = 1.0f;
  int n = 32;
  CUdeviceptr inside = y + 64;
  void *args[] = {&inside, &v, &n};
  assert_int_equal(launch1(f, 1, 32, 0, NULL, args), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_LAST_ERROR_HAS("freed memory");
}

static void other_gpus_buffer_is_refused(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("7.5,8.6", NULL), CUDA_SUCCESS);
  fake_use_device(1);
  CUdeviceptr on_1 = dev_alloc(128);
  CUcontext c;
  assert_int_equal(fk.CtxPopCurrent(&c), CUDA_SUCCESS);
  fake_use_device(0);
  const char *names[] = {"fc_fill"};
  CUfunction f = function(load_entries(names, 1), "fc_fill");
  float v = 1.0f;
  int n = 32;
  void *args[] = {&on_1, &v, &n};
  assert_int_equal(launch1(f, 1, 32, 0, NULL, args), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_LAST_ERROR_HAS("memory of CUDA device 1");
}

/* Beyond the device's limits (1024 threads, 1024 x 1024 x 64, 48 KiB of
 * dynamic shared memory without opting in): CUDA_ERROR_INVALID_VALUE. */
static void launch_larger_than_the_device_is_refused(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_test_copy");
  CUdeviceptr a = dev_alloc(64), b = dev_alloc(64);
  int n = 16;
  void *args[] = {&a, &b, &n};
  assert_int_equal(fk.LaunchKernel(f, 1, 1, 1, 32, 32, 2, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(fk.LaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(fk.LaunchKernel(f, 1, 1, 1, 1, 1, 65, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(fk.LaunchKernel(f, 1, 65536, 1, 32, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(fk.LaunchKernel(f, 1, 1, 1, 32, 1, 1, 48 * 1024 + 1, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(fk.LaunchKernel(NULL, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(fk.launch_count(), 0);
  assert_int_equal(fk.LaunchKernel(f, 1, 1, 1, 32, 32, 1, 48 * 1024, NULL, args, NULL), CUDA_SUCCESS);
}

/* Fresh device memory holds a NaN pattern: a kernel reading what nobody
 * wrote gets NaN, not a convenient zero. */
static void fresh_memory_reads_as_nan(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_test_copy");
  enum { N = 300 };
  float got[N];
  CUdeviceptr in = dev_alloc(sizeof got), out = dev_alloc(sizeof got);
  int n = N;
  void *args[] = {&in, &out, &n};
  assert_int_equal(launch1(f, 2, 256, 0, NULL, args), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoH(got, out, sizeof got), CUDA_SUCCESS);
  for (int i = 0; i < N; i++) assert_true(got[i] != got[i]);
}

/* ------------------------------------------------- streams and order --- */

/* A result copied back asynchronously is there only after synchronising:
 * reading it before shows what the buffer held. */
static void result_read_before_sync_is_stale(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_fill");
  CUstream s;
  assert_int_equal(fk.StreamCreate(&s, 0), CUDA_SUCCESS);
  enum { N = 64 };
  float got[N];
  for (int i = 0; i < N; i++) got[i] = -7.0f;
  CUdeviceptr y = dev_alloc(sizeof got);
  float v = 2.5f;
  int n = N;
  void *args[] = {&y, &v, &n};
  assert_int_equal(launch1(f, 1, N, 0, s, args), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoHAsync(got, y, sizeof got, s), CUDA_SUCCESS);
  for (int i = 0; i < N; i++) assert_true(got[i] == -7.0f); /* nothing ran yet */
  assert_int_equal(fk.pending_ops(), 2);
  assert_int_equal(fk.StreamSynchronize(s), CUDA_SUCCESS);
  for (int i = 0; i < N; i++) assert_true(got[i] == 2.5f);
  assert_int_equal(fk.pending_ops(), 0);
  assert_int_equal(fk.StreamDestroy(s), CUDA_SUCCESS);
}

/* Kernel parameters and host-to-device sources are taken at the call. */
static void call_arguments_are_taken_at_the_call(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_test_affine");
  CUstream s;
  assert_int_equal(fk.StreamCreate(&s, 0), CUDA_SUCCESS);
  float host[4] = {1, 2, 3, 4}, got[4];
  CUdeviceptr y = dev_alloc(sizeof host);
  assert_int_equal(fk.MemcpyHtoDAsync(y, host, sizeof host, s), CUDA_SUCCESS);
  for (int i = 0; i < 4; i++) host[i] = 100.0f; /* after the call: not copied */
  float a = 2.0f, b = 0.5f;
  int n = 4;
  void *args[] = {&y, &a, &b, &n};
  assert_int_equal(launch1(f, 1, 4, 0, s, args), CUDA_SUCCESS);
  a = 10.0f; /* after the launch: not seen */
  assert_int_equal(fk.StreamSynchronize(s), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoH(got, y, sizeof got), CUDA_SUCCESS);
  for (int i = 0; i < 4; i++) assert_true(got[i] == (float)(i + 1) * 2.0f + 0.5f);
  assert_int_equal(fk.StreamDestroy(s), CUDA_SUCCESS);
}

/* y = 1; then y = y*2 on stream A and y = y+1 on stream B: 3 in issue order,
 * 4 in the other. Returns the result. */
static float two_stream_result(CUfunction f, CUstream sa, CUstream sb, int wait_event, unsigned long long seed) {
  fk.set_seed(seed);
  float one = 1.0f, got;
  CUdeviceptr y = dev_alloc(sizeof one);
  assert_int_equal(fk.MemcpyHtoD(y, &one, sizeof one), CUDA_SUCCESS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_SUCCESS);
  float two = 2.0f, zero = 0.0f, unit = 1.0f;
  int n = 1;
  void *doubling[] = {&y, &two, &zero, &n}, *increment[] = {&y, &unit, &unit, &n};
  CUevent e;
  assert_int_equal(fk.EventCreate(&e, 0), CUDA_SUCCESS);
  assert_int_equal(launch1(f, 1, 1, 0, sa, doubling), CUDA_SUCCESS);
  assert_int_equal(fk.EventRecord(e, sa), CUDA_SUCCESS);
  if (wait_event) assert_int_equal(fk.StreamWaitEvent(sb, e, 0), CUDA_SUCCESS);
  assert_int_equal(launch1(f, 1, 1, 0, sb, increment), CUDA_SUCCESS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoH(&got, y, sizeof got), CUDA_SUCCESS);
  assert_int_equal(fk.EventDestroy(e), CUDA_SUCCESS);
  assert_int_equal(fk.MemFree(y), CUDA_SUCCESS);
  return got;
}

/* Counts the results over 24 seeds: [0] in issue order (3), [1] reversed (4). */
static void count_orders(CUfunction f, CUstream sa, CUstream sb, int wait_event, int counts[2]) {
  counts[0] = counts[1] = 0;
  for (unsigned long long seed = 1; seed <= 24; seed++) {
    float r = two_stream_result(f, sa, sb, wait_event, seed);
    assert_true(r == 3.0f || r == 4.0f);
    counts[r == 4.0f]++;
  }
}

static void streams_race_unless_an_event_orders_them(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_test_affine");
  CUstream sa, sb;
  assert_int_equal(fk.StreamCreate(&sa, 0), CUDA_SUCCESS);
  assert_int_equal(fk.StreamCreate(&sb, 0), CUDA_SUCCESS);
  int counts[2];
  count_orders(f, sa, sb, 1, counts);
  assert_int_equal(counts[1], 0); /* the event orders them, whatever the seed */
  count_orders(f, sa, sb, 0, counts);
  assert_true(counts[0] > 0 && counts[1] > 0); /* the race shows both ways */
}

/* The legacy default stream waits for blocking streams and they for it;
 * a CU_STREAM_NON_BLOCKING stream does neither. */
static void legacy_stream_orders_blocking_streams_only(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_test_affine");
  CUstream blocking, nonblocking;
  assert_int_equal(fk.StreamCreate(&blocking, 0), CUDA_SUCCESS);
  assert_int_equal(fk.StreamCreate(&nonblocking, 1), CUDA_SUCCESS);
  int counts[2];
  count_orders(f, blocking, NULL, 0, counts);
  assert_int_equal(counts[1], 0);
  count_orders(f, NULL, blocking, 0, counts);
  assert_int_equal(counts[1], 0);
  count_orders(f, nonblocking, NULL, 0, counts);
  assert_true(counts[0] > 0 && counts[1] > 0);
}

/* Queries do not block: work pending answers NOT_READY (and then runs). */
static void queries_and_events(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_fill");
  CUstream s;
  assert_int_equal(fk.StreamCreate(&s, 0), CUDA_SUCCESS);
  CUevent start, end, untimed;
  assert_int_equal(fk.EventCreate(&start, 0), CUDA_SUCCESS);
  assert_int_equal(fk.EventCreate(&end, 0), CUDA_SUCCESS);
  assert_int_equal(fk.EventCreate(&untimed, 2), CUDA_SUCCESS); /* CU_EVENT_DISABLE_TIMING */
  assert_int_equal(fk.EventQuery(end), CUDA_SUCCESS);           /* never recorded: complete */
  assert_int_equal(fk.StreamQuery(s), CUDA_SUCCESS);
  CUdeviceptr y = dev_alloc(256 * sizeof(float));
  float v = 1.0f;
  int n = 256;
  void *args[] = {&y, &v, &n};
  assert_int_equal(fk.EventRecord(start, s), CUDA_SUCCESS);
  assert_int_equal(launch1(f, 1, 256, 0, s, args), CUDA_SUCCESS);
  assert_int_equal(fk.EventRecord(end, s), CUDA_SUCCESS);
  assert_int_equal(fk.EventRecord(untimed, s), CUDA_SUCCESS);
  float ms = -1.0f;
  assert_int_equal(fk.EventElapsedTime(&ms, start, end), CUDA_ERROR_NOT_READY);
  assert_int_equal(fk.EventQuery(end), CUDA_ERROR_NOT_READY);
  assert_int_equal(fk.EventQuery(end), CUDA_SUCCESS);
  assert_int_equal(fk.StreamQuery(s), CUDA_ERROR_NOT_READY); /* `untimed` was recorded after `end` */
  assert_int_equal(fk.StreamQuery(s), CUDA_SUCCESS);
  assert_int_equal(fk.EventElapsedTime(&ms, start, end), CUDA_SUCCESS);
  assert_true(ms >= 0.0f);
  assert_int_equal(fk.EventElapsedTime(&ms, start, untimed), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(launch1(f, 1, 256, 0, s, args), CUDA_SUCCESS);
  assert_int_equal(fk.StreamQuery(s), CUDA_ERROR_NOT_READY);
  assert_int_equal(fk.StreamQuery(s), CUDA_SUCCESS);
  assert_int_equal(fk.EventDestroy(start), CUDA_SUCCESS);
  assert_int_equal(fk.EventDestroy(end), CUDA_SUCCESS);
  assert_int_equal(fk.EventDestroy(untimed), CUDA_SUCCESS);
  assert_int_equal(fk.EventDestroy(untimed), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(fk.StreamDestroy(s), CUDA_SUCCESS);
}

static void memsets(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("7.5", NULL), CUDA_SUCCESS);
  fake_use_device(0);
  CUstream s;
  assert_int_equal(fk.StreamCreate(&s, 0), CUDA_SUCCESS);
  unsigned char got[64];
  CUdeviceptr p = dev_alloc(sizeof got);
  assert_int_equal(fk.MemsetD8(p, 0x11, 64), CUDA_SUCCESS);
  assert_int_equal(fk.MemsetD32Async(p + 8, 0xAABBCCDDu, 4, s), CUDA_SUCCESS);
  assert_int_equal(fk.MemsetD8Async(p + 60, 0x22, 4, s), CUDA_SUCCESS);
  assert_int_equal(fk.StreamSynchronize(s), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoH(got, p, sizeof got), CUDA_SUCCESS);
  for (int i = 0; i < 64; i++) {
    unsigned char want = 0x11;
    if (i >= 8 && i < 24) want = (unsigned char)(0xAABBCCDDu >> (8 * (i % 4))); /* little-endian words */
    if (i >= 60) want = 0x22;
    assert_int_equal(got[i], want);
  }
  assert_int_equal(fk.MemsetD32(p + 2, 0, 1), CUDA_ERROR_INVALID_VALUE); /* not 4-byte aligned */
  assert_int_equal(fk.MemsetD32(p, 0, 17), CUDA_ERROR_INVALID_VALUE);    /* past the end */
  assert_int_equal(fk.StreamDestroy(s), CUDA_SUCCESS);
}


/* ------------------------------------ compiled barriers, big launches --- */

/* One EM_SYNC() in the source that the host compiler turned into two call
 * sites (jump threading on a thread-dependent flag tested on both sides of
 * the barrier, fc_test_rotate_active): every thread reaches the same
 * barrier, which is correct CUDA, and must not be called divergence. */
static void barrier_the_compiler_duplicated_is_one_barrier(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("7.5", NULL), CUDA_SUCCESS);
  fake_use_device(0);
  const char *names[] = {"fc_test_rotate_active", "fc_test_neighbour_sums"};
  CUmodule m = load_entries(names, 2);
  enum { B = 128, N = 100 };
  float in[B], got[B], want[B];
  for (int i = 0; i < B; i++) in[i] = (float)(i * 3 + 1);
  CUdeviceptr y = dev_alloc(sizeof in);
  for (unsigned long long seed = 1; seed <= 3; seed++) {
    fk.set_seed(seed);
    int n = N;
    assert_int_equal(fk.MemcpyHtoD(y, in, sizeof in), CUDA_SUCCESS);
    void *args[] = {&y, &n};
    assert_int_equal(launch1(function(m, "fc_test_rotate_active"), 1, B, 0, NULL, args), CUDA_SUCCESS);
    assert_int_equal(fk.MemcpyDtoH(got, y, sizeof got), CUDA_SUCCESS);
    for (int i = 0; i < B; i++) want[i] = i < N ? in[(i + 1) % N] : in[i];
    assert_memory_equal(got, want, sizeof want);

    int rounds = 3;
    assert_int_equal(fk.MemcpyHtoD(y, in, sizeof in), CUDA_SUCCESS);
    void *args2[] = {&y, &n, &rounds};
    assert_int_equal(launch1(function(m, "fc_test_neighbour_sums"), 1, B, 0, NULL, args2), CUDA_SUCCESS);
    assert_int_equal(fk.MemcpyDtoH(got, y, sizeof got), CUDA_SUCCESS);
    float v[B];
    memcpy(v, in, sizeof v);
    for (int k = 0; k < rounds; k++) {
      float next[B];
      for (int i = 0; i < N; i++) next[i] = v[i] + v[(i + 1) % N];
      memcpy(v, next, N * sizeof *v);
    }
    assert_memory_equal(got, v, sizeof v);
  }
}

/* Every block of a large 3-D grid runs exactly once (the block order is a
 * permutation drawn from the seed). */
static void every_block_of_a_large_grid_runs_once(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_test_count_blocks");
  const unsigned g[3] = {1000, 67, 3};
  size_t blocks = (size_t)g[0] * g[1] * g[2];
  int *got = malloc(blocks * sizeof *got);
  assert_non_null(got);
  CUdeviceptr out = dev_alloc(blocks * sizeof *got);
  assert_int_equal(fk.MemsetD32(out, 0, blocks), CUDA_SUCCESS);
  void *args[] = {&out};
  assert_int_equal(fk.LaunchKernel(f, g[0], g[1], g[2], 2, 2, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoH(got, out, blocks * sizeof *got), CUDA_SUCCESS);
  for (size_t b = 0; b < blocks; b++)
    if (got[b] != 1) fail_msg("block %zu ran %d times", b, got[b]);
  free(got);
}

/* 1024-thread blocks (1-D and 16x8x8) with the whole 48 KiB of dynamic
 * shared memory, and a launch with none. */
static void full_blocks_and_all_shared_memory(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_test_shared_reverse");
  enum { WORDS = 48 * 1024 / 4, G = 3, N = WORDS * G };
  float *in = malloc(N * sizeof *in), *got = malloc(N * sizeof *got);
  assert_true(in && got);
  for (int i = 0; i < N; i++) in[i] = (float)i;
  CUdeviceptr din = dev_alloc(N * sizeof *in), dout = dev_alloc(N * sizeof *got);
  assert_int_equal(fk.MemcpyHtoD(din, in, N * sizeof *in), CUDA_SUCCESS);
  const unsigned shapes[2][3] = {{1024, 1, 1}, {16, 8, 8}};
  for (int s = 0; s < 2; s++) {
    int words = WORDS;
    void *args[] = {&din, &dout, &words};
    assert_int_equal(fk.LaunchKernel(f, G, 1, 1, shapes[s][0], shapes[s][1], shapes[s][2], WORDS * 4, NULL, args, NULL),
                     CUDA_SUCCESS);
    assert_int_equal(fk.MemcpyDtoH(got, dout, N * sizeof *got), CUDA_SUCCESS);
    for (int i = 0; i < N; i++) {
      float want = (float)(i / WORDS * WORDS + (WORDS - 1 - i % WORDS));
      if (got[i] != want) fail_msg("shape %d: out[%d] = %g, want %g", s, i, got[i], want);
    }
  }
  int zero = 0;
  void *args0[] = {&din, &dout, &zero};
  assert_int_equal(launch1(f, 1, 1024, 0, NULL, args0), CUDA_SUCCESS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_SUCCESS);
  free(in);
  free(got);
}

/* A kernel without parameters takes kernelParams NULL. */
static void kernel_without_parameters(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_test_no_params");
  assert_int_equal(fk.LaunchKernel(f, 2, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL), CUDA_SUCCESS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_SUCCESS);
  assert_int_equal(fk.launch_count(), 1);
}

/* A launch that failed mid-block (barrier divergence) abandons fibers in the
 * middle of the kernel; the next context's launches reuse those stacks and
 * must compute right (and, under ASan, find them clean). */
static void launch_after_a_failed_block_reuses_the_stacks(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("7.5", NULL), CUDA_SUCCESS);
  fake_use_device(0);
  const char *names[] = {"fc_test_barrier_divergence", "fc_test_shared_reverse"};
  CUmodule m = load_entries(names, 2);
  CUdeviceptr y = dev_alloc(1024 * sizeof(float));
  void *args[] = {&y};
  assert_int_equal(launch1(function(m, "fc_test_barrier_divergence"), 1, 1024, 0, NULL, args), CUDA_SUCCESS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_ERROR_LAUNCH_FAILED);
  assert_int_equal(fk.PrimaryCtxRelease(0), CUDA_SUCCESS);
  CUcontext c;
  assert_int_equal(fk.CtxPopCurrent(&c), CUDA_SUCCESS);
  fake_use_device(0);
  m = load_entries(names, 2);
  enum { WORDS = 4096 };
  float in[WORDS], got[WORDS];
  for (int i = 0; i < WORDS; i++) in[i] = (float)(i % 977) - 3.0f;
  CUdeviceptr din = dev_alloc(sizeof in), dout = dev_alloc(sizeof got);
  assert_int_equal(fk.MemcpyHtoD(din, in, sizeof in), CUDA_SUCCESS);
  int words = WORDS;
  void *args2[] = {&din, &dout, &words};
  assert_int_equal(launch1(function(m, "fc_test_shared_reverse"), 1, 1024, sizeof in, NULL, args2), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoH(got, dout, sizeof got), CUDA_SUCCESS);
  for (int i = 0; i < WORDS; i++) assert_true(got[i] == in[WORDS - 1 - i]);
}

/* --------------------------------------------- allocation boundaries --- */

/* A pointer one past the end of an allocation is a pointer into that
 * allocation, even when the next allocation starts at that very address:
 * fc_test_write_before_start handed a + 64 floats writes a's last float. */
static void one_past_the_end_is_not_the_next_allocation(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_test_write_before_start");
  enum { N = 64 }; /* 256 bytes: a whole number of the double's alignment */
  CUdeviceptr a = dev_alloc(N * sizeof(float)), b = dev_alloc(N * sizeof(float));
  assert_int_equal(fk.MemsetD32(a, 0, N), CUDA_SUCCESS);
  assert_int_equal(fk.MemsetD32(b, 0, N), CUDA_SUCCESS);
  CUdeviceptr end = a + N * sizeof(float);
  void *args[] = {&end};
  assert_int_equal(launch1(f, 1, 1, 0, NULL, args), CUDA_SUCCESS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_SUCCESS);
  float got_a[N], got_b[N];
  assert_int_equal(fk.MemcpyDtoH(got_a, a, sizeof got_a), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoH(got_b, b, sizeof got_b), CUDA_SUCCESS);
  for (int i = 0; i < N; i++) {
    assert_true(got_a[i] == (i == N - 1 ? 1.0f : 0.0f));
    assert_true(got_b[i] == 0.0f);
  }
}

/* ------------------------------------- events, streams and contexts --- */

/* cuEventRecord on an event already recorded replaces what it captures
 * (cuda.h: later queries and waits look at the most recent record only):
 * when the first record's work has run and the second's has not, the event
 * is not complete, cuEventSynchronize waits for the second, and a stream
 * waiting on it waits for the second. */
static void event_recorded_twice_stands_for_the_last_record(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_fill");
  CUstream sa, sb;
  assert_int_equal(fk.StreamCreate(&sa, 0), CUDA_SUCCESS);
  assert_int_equal(fk.StreamCreate(&sb, 0), CUDA_SUCCESS);
  CUevent e;
  assert_int_equal(fk.EventCreate(&e, 0), CUDA_SUCCESS);
  enum { N = 64 };
  CUdeviceptr y = dev_alloc(N * sizeof(float));
  assert_int_equal(fk.CtxSynchronize(), CUDA_SUCCESS);
  float got[N];
  for (int i = 0; i < N; i++) got[i] = -1.0f;
  float v = 4.0f;
  int n = N;
  void *args[] = {&y, &v, &n};
  assert_int_equal(fk.EventRecord(e, sa), CUDA_SUCCESS); /* first record: nothing before it */
  assert_int_equal(launch1(f, 1, N, 0, sb, args), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoHAsync(got, y, sizeof got, sb), CUDA_SUCCESS);
  assert_int_equal(fk.EventRecord(e, sb), CUDA_SUCCESS); /* second record: after the fill and the copy */
  assert_int_equal(fk.StreamSynchronize(sa), CUDA_SUCCESS); /* the first record's work is done */
  assert_int_not_equal(fk.EventQuery(e), CUDA_SUCCESS);
  assert_int_equal(fk.EventSynchronize(e), CUDA_SUCCESS);
  for (int i = 0; i < N; i++) assert_true(got[i] == 4.0f);

  /* The same through cuStreamWaitEvent: a stream waiting on the event waits
   * for the second record's work. */
  for (int i = 0; i < N; i++) got[i] = -1.0f;
  float w = 9.0f;
  void *args2[] = {&y, &w, &n};
  CUstream sc;
  assert_int_equal(fk.StreamCreate(&sc, 1), CUDA_SUCCESS);
  assert_int_equal(fk.EventRecord(e, sa), CUDA_SUCCESS);
  assert_int_equal(launch1(f, 1, N, 0, sb, args2), CUDA_SUCCESS);
  assert_int_equal(fk.EventRecord(e, sb), CUDA_SUCCESS);
  assert_int_equal(fk.StreamSynchronize(sa), CUDA_SUCCESS);
  /* CU_EVENT_WAIT_EXTERNAL "is invalid outside of stream capture" (cuda.h). */
  assert_int_equal(fk.StreamWaitEvent(sc, e, 1), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(fk.StreamWaitEvent(sc, e, 0), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoHAsync(got, y, sizeof got, sc), CUDA_SUCCESS);
  assert_int_equal(fk.StreamSynchronize(sc), CUDA_SUCCESS);
  for (int i = 0; i < N; i++) assert_true(got[i] == 9.0f);
  assert_int_equal(fk.CtxSynchronize(), CUDA_SUCCESS);
  assert_int_equal(fk.EventDestroy(e), CUDA_SUCCESS);
}

/* An event destroyed while two of its records are pending: both records
 * still run later and must not touch the freed event, nor an event made
 * later at the same address (ASan and valgrind see the use after free; the
 * plain build sees a new event complete before its work ran). */
static void event_destroyed_with_two_records_pending(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_fill");
  CUstream sa, sb;
  assert_int_equal(fk.StreamCreate(&sa, 0), CUDA_SUCCESS);
  assert_int_equal(fk.StreamCreate(&sb, 0), CUDA_SUCCESS);
  CUdeviceptr y = dev_alloc(64 * sizeof(float));
  float v = 1.0f;
  int n = 64;
  void *args[] = {&y, &v, &n};
  enum { K = 8 };
  for (int k = 0; k < K; k++) {
    CUevent e;
    assert_int_equal(fk.EventCreate(&e, 0), CUDA_SUCCESS);
    assert_int_equal(launch1(f, 1, 64, 0, sa, args), CUDA_SUCCESS);
    assert_int_equal(fk.EventRecord(e, sa), CUDA_SUCCESS);
    assert_int_equal(fk.EventRecord(e, sa), CUDA_SUCCESS);
    assert_int_equal(fk.EventDestroy(e), CUDA_SUCCESS);
  }
  /* New events (the allocator may hand out the freed ones' memory), each
   * recorded after its own pending launch on the other stream. */
  CUevent keep[K];
  for (int k = 0; k < K; k++) {
    assert_int_equal(fk.EventCreate(&keep[k], 0), CUDA_SUCCESS);
    assert_int_equal(launch1(f, 1, 64, 0, sb, args), CUDA_SUCCESS);
    assert_int_equal(fk.EventRecord(keep[k], sb), CUDA_SUCCESS);
  }
  assert_int_equal(fk.StreamSynchronize(sa), CUDA_SUCCESS); /* the destroyed events' records run */
  for (int k = 0; k < K; k++) {
    if (fk.EventQuery(keep[k]) != CUDA_ERROR_NOT_READY) fail_msg("event %d complete before its work ran", k);
  }
  assert_int_equal(fk.CtxSynchronize(), CUDA_SUCCESS);
  for (int k = 0; k < K; k++) {
    assert_int_equal(fk.EventQuery(keep[k]), CUDA_SUCCESS);
    assert_int_equal(fk.EventDestroy(keep[k]), CUDA_SUCCESS);
  }
}

/* cuStreamWaitEvent with an event of another context (another GPU): the
 * waiting context's synchronisation points run the other context's work
 * the wait depends on, and cuCtxSynchronize, cuMemFree and the stream
 * synchronisation all succeed. */
static void wait_on_another_contexts_event(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("7.5,8.6", NULL), CUDA_SUCCESS);
  const char *names[] = {"fc_fill", "fc_test_copy"};
  CUcontext c1 = fake_use_device(1);
  CUfunction fill1 = function(load_entries(names, 2), "fc_fill");
  CUstream s1;
  assert_int_equal(fk.StreamCreate(&s1, 0), CUDA_SUCCESS);
  CUevent e1;
  assert_int_equal(fk.EventCreate(&e1, 0), CUDA_SUCCESS);
  enum { N = 64 };
  CUdeviceptr y1 = dev_alloc(N * sizeof(float));
  float v = 6.0f, got[N];
  int n = N;
  void *fill_args[] = {&y1, &v, &n};
  assert_int_equal(launch1(fill1, 1, N, 0, s1, fill_args), CUDA_SUCCESS);
  assert_int_equal(fk.EventRecord(e1, s1), CUDA_SUCCESS);
  CUcontext popped;
  assert_int_equal(fk.CtxPopCurrent(&popped), CUDA_SUCCESS);
  assert_ptr_equal(popped, c1);

  fake_use_device(0);
  CUstream s0;
  assert_int_equal(fk.StreamCreate(&s0, 0), CUDA_SUCCESS);
  CUdeviceptr scratch = dev_alloc(16);
  assert_int_equal(fk.StreamWaitEvent(s0, e1, 0), CUDA_SUCCESS);
  /* Peer copy of device 1's result on device 0's stream, after the wait. */
  assert_int_equal(fk.MemcpyDtoHAsync(got, y1, sizeof got, s0), CUDA_SUCCESS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_SUCCESS);
  for (int i = 0; i < N; i++) assert_true(got[i] == 6.0f);

  /* Again, with cuMemFree as the synchronisation point. */
  float w = 7.0f;
  void *fill_args2[] = {&y1, &w, &n};
  assert_int_equal(fk.CtxPushCurrent(c1), CUDA_SUCCESS);
  assert_int_equal(launch1(fill1, 1, N, 0, s1, fill_args2), CUDA_SUCCESS);
  assert_int_equal(fk.EventRecord(e1, s1), CUDA_SUCCESS);
  assert_int_equal(fk.CtxPopCurrent(&popped), CUDA_SUCCESS);
  assert_int_equal(fk.StreamWaitEvent(s0, e1, 0), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoHAsync(got, y1, sizeof got, s0), CUDA_SUCCESS);
  assert_int_equal(fk.MemFree(scratch), CUDA_SUCCESS);
  for (int i = 0; i < N; i++) assert_true(got[i] == 7.0f);
}

/* "A kernel launch will fail if it is issued to a stream that is not
 * associated to the current device" (CUDA C Programming Guide, Stream and
 * Event Behavior). */
static void launch_on_another_devices_stream_is_refused(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("7.5,8.6", NULL), CUDA_SUCCESS);
  fake_use_device(1);
  CUstream s1;
  assert_int_equal(fk.StreamCreate(&s1, 0), CUDA_SUCCESS);
  CUcontext popped;
  assert_int_equal(fk.CtxPopCurrent(&popped), CUDA_SUCCESS);
  fake_use_device(0);
  const char *names[] = {"fc_fill"};
  CUfunction f = function(load_entries(names, 1), "fc_fill");
  CUdeviceptr y = dev_alloc(64 * sizeof(float));
  float v = 1.0f;
  int n = 64;
  void *args[] = {&y, &v, &n};
  assert_int_equal(launch1(f, 1, 64, 0, s1, args), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(fk.launch_count(), 0);
  assert_int_equal(fk.pending_ops(), 0);
}

/* Work of a library double (fakecuda_enqueue_work): it runs in stream
 * order at a synchronisation point, reaches device memory only through
 * fakecuda_device_span (a range past an allocation's end fails the work as
 * a faulting kernel), and is refused, its payload released, on a stream of
 * another context or without a run function. */
typedef struct lib_work {
  CUdeviceptr p;
  size_t bytes;
  int ran, released;
} lib_work;

static fakecuda_device_span_fn lib_span;

static CUresult lib_work_run(void *payload, char *msg, size_t cap) {
  lib_work *w = payload;
  void *host = NULL;
  w->ran++;
  CUresult r = lib_span(w->p, w->bytes, &host, msg, cap);
  if (r == CUDA_SUCCESS) memset(host, 0x42, w->bytes);
  return r;
}

static void lib_work_release(void *payload) { ((lib_work *)payload)->released++; }

static void library_work_on_streams(void **state) {
  (void)state;
  FAKE_NEED();
  fakecuda_enqueue_work_fn enqueue = (fakecuda_enqueue_work_fn)dlsym(fk.handle, "fakecuda_enqueue_work");
  lib_span = (fakecuda_device_span_fn)dlsym(fk.handle, "fakecuda_device_span");
  assert_non_null(enqueue);
  assert_non_null(lib_span);
  assert_int_equal(fake_init_with("7.5,8.6", NULL), CUDA_SUCCESS);
  fake_use_device(1);
  CUstream s1;
  assert_int_equal(fk.StreamCreate(&s1, 0), CUDA_SUCCESS);
  CUcontext popped;
  assert_int_equal(fk.CtxPopCurrent(&popped), CUDA_SUCCESS);
  fake_use_device(0);
  CUstream s0;
  assert_int_equal(fk.StreamCreate(&s0, 0), CUDA_SUCCESS);
  CUdeviceptr p = dev_alloc(64);
  lib_work w = {p, 64, 0, 0};
  assert_int_equal(enqueue(s0, lib_work_run, lib_work_release, &w, "test work"), CUDA_SUCCESS);
  assert_int_equal(w.ran, 0);
  assert_int_equal(fk.StreamSynchronize(s0), CUDA_SUCCESS);
  assert_int_equal(w.ran, 1);
  assert_int_equal(w.released, 1);
  unsigned char got[64], want[64];
  memset(want, 0x42, sizeof want);
  assert_int_equal(fk.MemcpyDtoH(got, p, sizeof got), CUDA_SUCCESS);
  assert_memory_equal(got, want, sizeof want);
  lib_work other = {p, 64, 0, 0};
  assert_int_equal(enqueue(s1, lib_work_run, lib_work_release, &other, "test work"), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(enqueue(s0, NULL, lib_work_release, &other, "test work"), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(other.released, 2);
  assert_int_equal(other.ran, 0);
  char msg[128];
  void *host;
  assert_int_equal(lib_span(p, 4, &host, msg, sizeof msg), CUDA_ERROR_INVALID_CONTEXT); /* outside a run */
  lib_work past = {p + 8, 57, 0, 0};
  assert_int_equal(enqueue(NULL, lib_work_run, lib_work_release, &past, "test work"), CUDA_SUCCESS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_LAST_ERROR_HAS("run 1 bytes past the end");
  assert_int_equal(enqueue(NULL, lib_work_run, lib_work_release, &w, "test work"), CUDA_ERROR_ILLEGAL_ADDRESS);
  assert_int_equal(w.released, 2);
}

/* cuEventRecord: "hEvent and hStream must be from the same context
 * otherwise CUDA_ERROR_INVALID_HANDLE is returned" (CUDA Driver API). */
static void event_and_stream_of_different_contexts(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("7.5,8.6", NULL), CUDA_SUCCESS);
  fake_use_device(1);
  CUstream s1;
  assert_int_equal(fk.StreamCreate(&s1, 0), CUDA_SUCCESS);
  CUcontext popped;
  assert_int_equal(fk.CtxPopCurrent(&popped), CUDA_SUCCESS);
  fake_use_device(0);
  CUevent e0;
  assert_int_equal(fk.EventCreate(&e0, 0), CUDA_SUCCESS);
  assert_int_equal(fk.EventRecord(e0, s1), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(fk.pending_ops(), 0);
  assert_int_equal(fk.EventQuery(e0), CUDA_SUCCESS);
}

/* cuStreamDestroy with work pending returns at once and the work still runs
 * (cuda.h); the last release of a primary context runs its pending work
 * before it destroys the context. */
static void work_outlives_its_stream_and_runs_before_release(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_fill");
  enum { N = 128 };
  float got[N];
  for (int i = 0; i < N; i++) got[i] = -1.0f;
  CUdeviceptr y = dev_alloc(sizeof got);
  float v = 3.0f;
  int n = N;
  void *args[] = {&y, &v, &n};
  CUstream s;
  assert_int_equal(fk.StreamCreate(&s, 1), CUDA_SUCCESS);
  assert_int_equal(launch1(f, 1, N, 0, s, args), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoHAsync(got, y, sizeof got, s), CUDA_SUCCESS);
  assert_int_equal(fk.StreamDestroy(s), CUDA_SUCCESS);
  assert_int_equal(fk.StreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(fk.pending_ops(), 2);
  assert_int_equal(fk.CtxSynchronize(), CUDA_SUCCESS);
  for (int i = 0; i < N; i++) assert_true(got[i] == 3.0f);

  float w = 5.0f;
  void *args2[] = {&y, &w, &n};
  assert_int_equal(fk.StreamCreate(&s, 0), CUDA_SUCCESS);
  assert_int_equal(launch1(f, 1, N, 0, s, args2), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoHAsync(got, y, sizeof got, s), CUDA_SUCCESS);
  assert_int_equal(fk.PrimaryCtxRelease(0), CUDA_SUCCESS);
  assert_int_equal(fk.pending_ops(), 0);
  for (int i = 0; i < N; i++) assert_true(got[i] == 5.0f);
  assert_int_equal(fk.live_allocations(), 0);
}

/* A synchronous cuMemcpyHtoD synchronises its stream first ("For transfers
 * from pageable host memory to device memory, a stream sync is performed
 * before the copy is initiated"; from pinned memory it is synchronous; CUDA
 * Driver API, API synchronization behavior): after it returns, earlier work
 * on the legacy stream, and so on every blocking stream, is done, including
 * an asynchronous copy back to the host. */
static void synchronous_copy_to_the_device_syncs_its_stream(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_fill");
  CUstream s;
  assert_int_equal(fk.StreamCreate(&s, 0), CUDA_SUCCESS);
  enum { N = 64 };
  float got[N], src[N];
  for (int i = 0; i < N; i++) got[i] = -1.0f, src[i] = (float)i;
  CUdeviceptr y = dev_alloc(sizeof got), z = dev_alloc(sizeof src);
  float v = 8.0f;
  int n = N;
  void *args[] = {&y, &v, &n};
  assert_int_equal(launch1(f, 1, N, 0, s, args), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoHAsync(got, y, sizeof got, s), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyHtoD(z, src, sizeof src), CUDA_SUCCESS); /* legacy stream: after s's work */
  for (int i = 0; i < N; i++) assert_true(got[i] == 8.0f);
  assert_int_equal(fk.StreamDestroy(s), CUDA_SUCCESS);
}

/* ----------------------------------------------------------- volume --- */

/* A launch over a million elements, and a queue of twenty thousand pending
 * operations run at one synchronisation, in issue order. (Tests never time
 * things; on this project's 2-core machines the launch takes about 0.06 s and
 * the queue 0.01 s with the x86-64 context switch, 0.7 s for the launch with
 * the ucontext fallback; a scheduler quadratic in the queue took 6.6 s.) */
static void a_million_elements_and_a_long_queue(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = one_kernel("fc_fill");
  enum { N = 1 << 20 };
  CUdeviceptr y = dev_alloc((size_t)N * sizeof(float));
  float v = 0.5f;
  int n = N;
  void *args[] = {&y, &v, &n};
  assert_int_equal(launch1(f, N / 256, 256, 0, NULL, args), CUDA_SUCCESS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_SUCCESS);
  float last;
  assert_int_equal(fk.MemcpyDtoH(&last, y + (N - 1) * sizeof(float), sizeof last), CUDA_SUCCESS);
  assert_true(last == 0.5f);

  enum { OPS = 20000 };
  CUdeviceptr word = dev_alloc(4);
  for (unsigned i = 0; i < OPS; i++) assert_int_equal(fk.MemsetD32(word, i, 1), CUDA_SUCCESS);
  assert_int_equal(fk.pending_ops(), OPS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_SUCCESS);
  unsigned got;
  assert_int_equal(fk.MemcpyDtoH(&got, word, sizeof got), CUDA_SUCCESS);
  assert_int_equal(got, OPS - 1); /* the last one issued ran last */
  assert_int_equal(fk.pending_ops(), 0);
}

/* ------------------------------------------------------ host threads --- */

typedef struct worker {
  int ordinal, iterations;
  CUfunction f;
  CUcontext ctx;
  int failures;
  char first_failure[160];
} worker;

#define WORKER_CHECK(w, cond)                                                                                  \
  do {                                                                                                         \
    if (!(cond) && (w)->failures++ == 0) snprintf((w)->first_failure, sizeof (w)->first_failure, "%s", #cond); \
  } while (0)

/* Each host thread uses its own GPU: a stream, copies, launches of
 * fc_test_affine and checks, over and over, while the other does the same. */
static void *worker_main(void *p) {
  worker *w = p;
  WORKER_CHECK(w, fk.CtxPushCurrent(w->ctx) == CUDA_SUCCESS);
  CUstream s = NULL;
  WORKER_CHECK(w, fk.StreamCreate(&s, 0) == CUDA_SUCCESS);
  enum { N = 2048 };
  static _Thread_local float host[N], got[N];
  for (int it = 0; it < w->iterations && !w->failures; it++) {
    CUdeviceptr y = 0;
    WORKER_CHECK(w, fk.MemAlloc(&y, sizeof host) == CUDA_SUCCESS);
    for (int i = 0; i < N; i++) host[i] = (float)(i + it + w->ordinal * 1000);
    WORKER_CHECK(w, fk.MemcpyHtoDAsync(y, host, sizeof host, s) == CUDA_SUCCESS);
    float a = (float)(w->ordinal + 2), b = (float)it;
    int n = N;
    void *args[] = {&y, &a, &b, &n};
    WORKER_CHECK(w, fk.LaunchKernel(w->f, N / 128, 1, 1, 128, 1, 1, 0, s, args, NULL) == CUDA_SUCCESS);
    WORKER_CHECK(w, fk.MemcpyDtoHAsync(got, y, sizeof got, s) == CUDA_SUCCESS);
    WORKER_CHECK(w, fk.StreamSynchronize(s) == CUDA_SUCCESS);
    for (int i = 0; i < N; i++) WORKER_CHECK(w, got[i] == host[i] * a + b);
    WORKER_CHECK(w, fk.MemFree(y) == CUDA_SUCCESS);
  }
  WORKER_CHECK(w, fk.StreamDestroy(s) == CUDA_SUCCESS);
  CUcontext popped;
  WORKER_CHECK(w, fk.CtxPopCurrent(&popped) == CUDA_SUCCESS);
  return NULL;
}

static void two_host_threads_at_once(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("7.5,8.6", NULL), CUDA_SUCCESS);
  worker w[2];
  memset(w, 0, sizeof w);
  const char *names[] = {"fc_test_affine"};
  for (int d = 0; d < 2; d++) {
    w[d].ordinal = d;
    w[d].iterations = 40;
    w[d].ctx = fake_use_device(d);
    w[d].f = function(load_entries(names, 1), "fc_test_affine");
    CUcontext popped;
    assert_int_equal(fk.CtxPopCurrent(&popped), CUDA_SUCCESS);
  }
  pthread_t t[2];
  for (int d = 0; d < 2; d++) assert_int_equal(pthread_create(&t[d], NULL, worker_main, &w[d]), 0);
  for (int d = 0; d < 2; d++) assert_int_equal(pthread_join(t[d], NULL), 0);
  for (int d = 0; d < 2; d++)
    if (w[d].failures) fail_msg("thread %d: %d failures, first: %s", d, w[d].failures, w[d].first_failure);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(fixture_kernels_compute, fake_test_setup),
      cmocka_unit_test_setup(functions_come_from_the_image, fake_test_setup),
      cmocka_unit_test_setup(geometry_in_three_dimensions, fake_test_setup),
      cmocka_unit_test_setup(barrier_makes_shared_exchange_right, fake_test_setup),
      cmocka_unit_test_setup(missing_barrier_gives_wrong_results, fake_test_setup),
      cmocka_unit_test_setup(dynamic_shared_and_barriers_in_helpers, fake_test_setup),
      cmocka_unit_test_setup(barrier_divergence_fails_the_launch, fake_test_setup),
      cmocka_unit_test_setup(write_out_of_bounds_is_caught, fake_test_setup),
      cmocka_unit_test_setup(host_pointer_is_refused, fake_test_setup),
      cmocka_unit_test_setup(freed_buffer_is_refused, fake_test_setup),
      cmocka_unit_test_setup(addresses_read_from_a_table, fake_test_setup),
      cmocka_unit_test_setup(table_entries_inside_across_and_at_barriers, fake_test_setup),
      cmocka_unit_test_setup(mapped_host_memory, fake_test_setup),
      cmocka_unit_test_setup(device_that_cannot_map_host_memory, fake_test_setup),
      cmocka_unit_test_setup(other_gpus_buffer_is_refused, fake_test_setup),
      cmocka_unit_test_setup(launch_larger_than_the_device_is_refused, fake_test_setup),
      cmocka_unit_test_setup(fresh_memory_reads_as_nan, fake_test_setup),
      cmocka_unit_test_setup(result_read_before_sync_is_stale, fake_test_setup),
      cmocka_unit_test_setup(call_arguments_are_taken_at_the_call, fake_test_setup),
      cmocka_unit_test_setup(streams_race_unless_an_event_orders_them, fake_test_setup),
      cmocka_unit_test_setup(legacy_stream_orders_blocking_streams_only, fake_test_setup),
      cmocka_unit_test_setup(queries_and_events, fake_test_setup),
      cmocka_unit_test_setup(memsets, fake_test_setup),
      cmocka_unit_test_setup(barrier_the_compiler_duplicated_is_one_barrier, fake_test_setup),
      cmocka_unit_test_setup(every_block_of_a_large_grid_runs_once, fake_test_setup),
      cmocka_unit_test_setup(full_blocks_and_all_shared_memory, fake_test_setup),
      cmocka_unit_test_setup(kernel_without_parameters, fake_test_setup),
      cmocka_unit_test_setup(launch_after_a_failed_block_reuses_the_stacks, fake_test_setup),
      cmocka_unit_test_setup(one_past_the_end_is_not_the_next_allocation, fake_test_setup),
      cmocka_unit_test_setup(event_recorded_twice_stands_for_the_last_record, fake_test_setup),
      cmocka_unit_test_setup(event_destroyed_with_two_records_pending, fake_test_setup),
      cmocka_unit_test_setup(wait_on_another_contexts_event, fake_test_setup),
      cmocka_unit_test_setup(launch_on_another_devices_stream_is_refused, fake_test_setup),
      cmocka_unit_test_setup(event_and_stream_of_different_contexts, fake_test_setup),
      cmocka_unit_test_setup(library_work_on_streams, fake_test_setup),
      cmocka_unit_test_setup(work_outlives_its_stream_and_runs_before_release, fake_test_setup),
      cmocka_unit_test_setup(synchronous_copy_to_the_device_syncs_its_stream, fake_test_setup),
      cmocka_unit_test_setup(a_million_elements_and_a_long_queue, fake_test_setup),
      cmocka_unit_test_setup(two_host_threads_at_once, fake_test_setup),
  };
  return cmocka_run_group_tests(tests, fake_group_setup, fake_group_teardown);
}
