/* Kernels of the test double's own tests (tests/unit/test_fakecuda_exec.c),
 * compiled into the double like kernels/ (its host builds run them). The
 * tests load them from small PTX texts that name their entries, or from the
 * committed fixture images (tests/fixtures/fakecuda: fc_fill, fc_axpy).
 * Several are wrong on purpose: each shows the double catching one class of
 * mistake a real GPU would punish. */
#include "em_kernel.h"

/* The two kernels of tests/fixtures/fakecuda/k.cu, same signatures. */
EM_GLOBAL void fc_fill(float *y, float v, int n) {
  int i = EM_BID_X * EM_BDIM_X + EM_TID_X;
  if (i < n) y[i] = v;
}

EM_GLOBAL void fc_axpy(float a, const float *x, float *y, int n) {
  int i = EM_BID_X * EM_BDIM_X + EM_TID_X;
  if (i < n) {
    float p = a * x[i];
    y[i] = p + y[i];
  }
}

/* y[i] = y[i] * a + b: two launches give a different result in each order. */
EM_GLOBAL void fc_test_affine(float *y, float a, float b, int n) {
  int i = EM_BID_X * EM_BDIM_X + EM_TID_X;
  if (i < n) y[i] = y[i] * a + b;
}

/* Reverses each block's slice of `in` through shared memory (blocks of at
 * most 256 threads). Without the barrier (use_barrier 0) a thread reads its
 * mirror's slot before the mirror wrote it: wrong whenever the mirror runs
 * later, which the double's random order makes happen. */
EM_GLOBAL void fc_test_block_reverse(const float *in, float *out, int use_barrier) {
  EM_SHARED float sh[256];
  int t = EM_TID_X, base = EM_BID_X * EM_BDIM_X;
  sh[t] = in[base + t];
  if (use_barrier) EM_SYNC();
  out[base + t] = sh[EM_BDIM_X - 1 - t];
}

/* The same through the launch's dynamic shared memory, with the barrier
 * inside a helper and a loop: `rounds` reversals, a barrier before each read
 * and after it (so the next round's writes wait). */
EM_DEVICE float fc_swap_round(float *sh, int t, int n, float v) {
  sh[t] = v;
  EM_SYNC();
  float r = sh[n - 1 - t];
  EM_SYNC();
  return r;
}

EM_GLOBAL void fc_test_dynamic_reverse(const float *in, float *out, int rounds) {
  EM_DYNAMIC_SHARED(float, sh);
  int t = EM_TID_X, n = EM_BDIM_X, base = EM_BID_X * n;
  float v = in[base + t];
  for (int k = 0; k < rounds; k++) v = fc_swap_round(sh, t, n, v);
  out[base + t] = v;
}

/* Every thread of a 3-D launch writes where it is: out[g * 12 + k] for its
 * global linear index g holds tid x y z, bid x y z, bdim x y z, gdim x y z. */
EM_GLOBAL void fc_test_geometry(int *out) {
  long long bx = EM_BID_X, by = EM_BID_Y, bz = EM_BID_Z;
  long long block = (bz * EM_GDIM_Y + by) * EM_GDIM_X + bx;
  long long thread = ((long long)EM_TID_Z * EM_BDIM_Y + EM_TID_Y) * EM_BDIM_X + EM_TID_X;
  long long g = block * ((long long)EM_BDIM_X * EM_BDIM_Y * EM_BDIM_Z) + thread;
  int *o = out + g * 12;
  o[0] = EM_TID_X, o[1] = EM_TID_Y, o[2] = EM_TID_Z;
  o[3] = EM_BID_X, o[4] = EM_BID_Y, o[5] = EM_BID_Z;
  o[6] = EM_BDIM_X, o[7] = EM_BDIM_Y, o[8] = EM_BDIM_Z;
  o[9] = EM_GDIM_X, o[10] = EM_GDIM_Y, o[11] = EM_GDIM_Z;
}

/* Writes y[n]: one element past the end of an n-element buffer. */
EM_GLOBAL void fc_test_write_past_end(float *y, int n) {
  if (EM_BID_X == 0 && EM_TID_X == 0) y[n] = 1.0f;
}

/* Writes y[-1]: one element before the start. */
EM_GLOBAL void fc_test_write_before_start(float *y) {
  if (EM_BID_X == 0 && EM_TID_X == 0) y[-1] = 1.0f;
}

/* Multi-tensor kernels read device addresses from a table in device memory
 * (kernels/em_kernel.h EM_DEVICE_ADDR). Block b fills buffer b, whose
 * address and element count are the table's entries 2b and 2b + 1, with
 * b + 1. A count beyond the buffer writes past its end; an address freed,
 * of the host or of nothing stops the launch. */
EM_GLOBAL void fc_test_table_fill(const em_i64 *tab) {
  const em_i64 *e = tab + 2 * (em_i64)EM_BID_X;
  float *y = EM_DEVICE_ADDR(float, e[0]);
  for (em_i64 i = EM_TID_X; i < e[1]; i += EM_BDIM_X) y[i] = (float)(EM_BID_X + 1);
}

/* Every thread passes a barrier; then the block's last thread alone writes
 * 1 through the table's entry 0 while the others wait at a second barrier;
 * then thread t writes t through entry 1. A bad entry 0 stops the last
 * thread where it reads it: a fault, whatever the waiting threads do. */
EM_GLOBAL void fc_test_table_fault_at_barrier(const em_i64 *tab) {
  EM_SYNC();
  if (EM_TID_X == EM_BDIM_X - 1) EM_DEVICE_ADDR(float, tab[0])[0] = 1.0f;
  EM_SYNC();
  float *y = EM_DEVICE_ADDR(float, tab[1]);
  y[EM_TID_X] = (float)EM_TID_X;
}

/* Half the block returns before a barrier the other half waits at. */
EM_GLOBAL void fc_test_barrier_divergence(float *y) {
  if (EM_TID_X < EM_BDIM_X / 2) return;
  EM_SYNC();
  y[EM_TID_X] = 1.0f;
}

/* Copies in[i] to out[i]: reading memory nobody wrote shows the NaN fill. */
EM_GLOBAL void fc_test_copy(const float *in, float *out, int n) {
  int i = EM_BID_X * EM_BDIM_X + EM_TID_X;
  if (i < n) out[i] = in[i];
}

/* Rotates y[0..n) by one place through shared memory in a block of at least
 * n threads (at most 256): y[t] = old y[(t + 1) % n]. Every thread of the
 * block reaches the one barrier, the inactive ones too, so this is correct
 * CUDA. The thread-dependent `active` tested on both sides of the barrier is
 * the shape the host compiler's jump threading duplicates the barrier for:
 * one EM_SYNC() in the source, two call sites in the object code (gcc 12, at
 * -O1 and above). */
EM_GLOBAL void fc_test_rotate_active(float *y, int n) {
  EM_SHARED float sh[256];
  int t = EM_TID_X;
  int active = t < n;
  float v = 0.0f;
  if (active) v = y[t];
  sh[t] = v;
  EM_SYNC();
  if (active) y[t] = sh[(t + 1) % n];
}

/* The same shape with both barriers in a loop: `rounds` times,
 * v[t] = v[t] + v[(t + 1) % n] for t < n. */
EM_GLOBAL void fc_test_neighbour_sums(float *y, int n, int rounds) {
  EM_SHARED float sh[256];
  int t = EM_TID_X;
  int active = t < n;
  float v = active ? y[t] : 0.0f;
  for (int k = 0; k < rounds; k++) {
    if (active) sh[t] = v;
    EM_SYNC();
    if (active) v = v + sh[(t + 1) % n];
    EM_SYNC();
  }
  if (active) y[t] = v;
}

/* Thread (0,0,0) of every block adds one to out[linear block index]: after
 * one launch each block's slot must hold exactly 1. */
EM_GLOBAL void fc_test_count_blocks(int *out) {
  if (EM_TID_X != 0 || EM_TID_Y != 0 || EM_TID_Z != 0) return;
  long long b = ((long long)EM_BID_Z * EM_GDIM_Y + EM_BID_Y) * EM_GDIM_X + EM_BID_X;
  out[b] = out[b] + 1;
}

/* Reverses each block's `words` floats through the launch's dynamic shared
 * memory (which must hold them), the threads of a 1-D to 3-D block striding
 * over the words: out[b*words + w] = in[b*words + words-1-w]. */
EM_GLOBAL void fc_test_shared_reverse(const float *in, float *out, int words) {
  EM_DYNAMIC_SHARED(float, sh);
  int nt = EM_BDIM_X * EM_BDIM_Y * EM_BDIM_Z;
  int t = (EM_TID_Z * EM_BDIM_Y + EM_TID_Y) * EM_BDIM_X + EM_TID_X;
  long long base = (long long)EM_BID_X * words;
  for (int w = t; w < words; w += nt) sh[w] = in[base + w];
  EM_SYNC();
  for (int w = t; w < words; w += nt) out[base + w] = sh[words - 1 - w];
}

/* No parameters at all: launched with kernelParams NULL. Declared before it
 * is defined: build-tools/kernel_wrappers.sh must take the declaration for
 * no second kernel of the same name. */
EM_GLOBAL void fc_test_no_params(void);
EM_GLOBAL void fc_test_no_params(void) {}
