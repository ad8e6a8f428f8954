/* Running a kernel launch on the CPU: the host build of the kernel
 * (the kernels/ sources compiled as C through em_kernel.h's host branch) over every
 * block of the grid and every thread of each block.
 *
 * Each thread of a block is a fiber (fakecuda_fiber.c). EM_SYNC() calls
 * em_host_sync, which parks the thread; when every thread of the block has
 * either parked or returned, the phase is over and the parked ones go on.
 * Within a phase the threads run one after another in a pseudo-random order
 * drawn from FAKECUDA_SEED, and the blocks of a grid too: a kernel that
 * counts on an order the hardware does not promise (a missing barrier, a
 * neighbour's shared value read too early, one block reading another's
 * output) gives wrong results here instead of passing by luck.
 *
 * Shared memory starts undefined on a GPU; here every block starts with the
 * static shared arrays (section em_shared) and the dynamic shared memory
 * filled with 0xFF bytes (a NaN for floats), so a read before the first write
 * shows.
 *
 * A barrier that not every thread reaches is undefined behaviour in CUDA
 * ("__syncthreads() is allowed in conditional code but only if the
 * conditional evaluates identically across the entire thread block", CUDA C
 * Programming Guide, Synchronization Functions): some threads waiting while
 * others returned, or threads waiting at different EM_SYNC calls, fails the
 * launch with CUDA_ERROR_LAUNCH_FAILED and a message that says which. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "em_kernel.h"
#include "fakecuda_fiber.h"
#include "fakecuda_internal.h"
#include "fakecuda_kernels.h"

#define POISON 0xFF
#define MAX_BLOCK_THREADS 1024

enum { T_RUNNING, T_WAITING, T_DONE };

typedef struct fc_thread {
  em_host_thread_state st;
  fc_fiber fiber;
  int state;
  int site;         /* the EM_SYNC() it waits at (em_kernel.h numbers them) */
} fc_thread;

const em_host_thread_state *em_host_thread;

static fc_thread threads[MAX_BLOCK_THREADS];
static fc_thread *running;
static void (*run_call)(void *const *);
static void *const *run_args;

/* The static shared arrays of every kernel (EM_SHARED puts them here). Weak:
 * a build whose kernels have none still links. */
extern char __start_em_shared[] __attribute__((weak, visibility("hidden")));
extern char __stop_em_shared[] __attribute__((weak, visibility("hidden")));

/* ------------------------------------------------------ randomness --- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

void fc_exec_seed(unsigned long long seed) { rng = seed ? seed : 0x9e3779b97f4a7c15ull; }

unsigned long long fc_random(void) {
  /* xorshift64* (Vigna): cheap, and plenty for shuffling. */
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 0x2545f4914f6cdd1dull;
}

static void shuffle(int *a, int n) {
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(fc_random() % (uint64_t)(i + 1));
    int t = a[i];
    a[i] = a[j];
    a[j] = t;
  }
}

static uint64_t gcd(uint64_t a, uint64_t b) {
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* ---------------------------------------------------------- threads --- */

void em_host_sync(int site) {
  fc_thread *t = running;
  t->site = site;
  t->state = T_WAITING;
  fc_fiber_yield();
  t->state = T_RUNNING;
}

static void thread_main(void *p) {
  (void)p;
  run_call(run_args);
}

static int thread_prepare(fc_thread *t) {
  if (!t->fiber.stack && fc_fiber_init(&t->fiber) != 0) return -1; /* stacks are mapped on first use */
  fc_fiber_start(&t->fiber, thread_main, t);
  t->state = T_RUNNING;
  t->site = -1;
  return 0;
}

/* -------------------------------------------------------------- a block --- */

typedef struct launch_run {
  const char *name;
  unsigned block[3], grid[3];
  int n_threads;
  unsigned char *dynamic_shared;
  size_t dynamic_bytes;
  char *msg;
  size_t msg_cap;
} launch_run;

static CUresult block_fail(const launch_run *r, const unsigned bid[3], const char *what) {
  snprintf(r->msg, r->msg_cap, "kernel %s, block (%u,%u,%u) of grid (%u,%u,%u), block (%u,%u,%u): %s", r->name, bid[0],
           bid[1], bid[2], r->grid[0], r->grid[1], r->grid[2], r->block[0], r->block[1], r->block[2], what);
  return CUDA_ERROR_LAUNCH_FAILED;
}

static CUresult run_block(const launch_run *r, const unsigned bid[3], int *order) {
  /* Shared memory starts undefined. */
  char *shared_lo = __start_em_shared, *shared_hi = __stop_em_shared;
  if (shared_lo && shared_hi > shared_lo) memset(shared_lo, POISON, (size_t)(shared_hi - shared_lo));
  if (r->dynamic_bytes) memset(r->dynamic_shared, POISON, r->dynamic_bytes);

  int n = r->n_threads;
  for (int i = 0; i < n; i++) {
    fc_thread *t = &threads[i];
    unsigned x = (unsigned)i % r->block[0], y = (unsigned)i / r->block[0] % r->block[1];
    unsigned z = (unsigned)i / (r->block[0] * r->block[1]);
    t->st = (em_host_thread_state){{(int)x, (int)y, (int)z},
                                   {(int)bid[0], (int)bid[1], (int)bid[2]},
                                   {(int)r->block[0], (int)r->block[1], (int)r->block[2]},
                                   {(int)r->grid[0], (int)r->grid[1], (int)r->grid[2]},
                                   r->dynamic_shared};
    if (thread_prepare(t) != 0) return block_fail(r, bid, "the test double could not map a fiber stack (out of memory)");
    order[i] = i;
  }

  int active = n, exited = 0;
  for (int phase = 0; active > 0; phase++) {
    shuffle(order, active);
    for (int k = 0; k < active; k++) {
      fc_thread *t = &threads[order[k]];
      running = t;
      em_host_thread = &t->st;
      fc_fiber_resume(&t->fiber);
      running = NULL;
      if (t->fiber.finished) t->state = T_DONE;
    }
    /* Who waits, who returned, and at which barrier. */
    int waiting = 0, site = -1, mixed_sites = 0;
    for (int k = 0; k < active; k++) {
      fc_thread *t = &threads[order[k]];
      if (t->state == T_DONE) {
        exited++;
        continue;
      }
      if (site < 0) site = t->site;
      else if (t->site != site) mixed_sites = 1;
      order[waiting++] = order[k];
    }
    if (waiting && exited) {
      char what[256];
      snprintf(what, sizeof what,
               "barrier divergence: %d thread%s returned while %d wait at EM_SYNC() (phase %d); a barrier must be "
               "reached by every thread of the block",
               exited, exited == 1 ? "" : "s", waiting, phase);
      return block_fail(r, bid, what);
    }
    if (mixed_sites)
      return block_fail(r, bid,
                        "barrier divergence: the threads wait at different EM_SYNC() calls; a barrier must be reached "
                        "by every thread of the block");
    active = waiting;
  }
  return CUDA_SUCCESS;
}

/* ---------------------------------------------------------- a launch --- */

CUresult fc_exec_launch(const char *name, void (*call)(void *const *), void *const *args, const unsigned grid[3],
                        const unsigned block[3], size_t shared_bytes, char *msg, size_t msg_cap) {
  msg[0] = '\0';
  launch_run r = {name, {block[0], block[1], block[2]}, {grid[0], grid[1], grid[2]},
                  (int)(block[0] * block[1] * block[2]), NULL, shared_bytes, msg, msg_cap};
  if (r.n_threads > MAX_BLOCK_THREADS) {
    snprintf(msg, msg_cap, "kernel %s: %d threads per block (the double runs at most %d)", name, r.n_threads,
             MAX_BLOCK_THREADS);
    return CUDA_ERROR_INVALID_VALUE;
  }
  /* malloc, not a static buffer: under ASan a read past the launch's
   * dynamic shared size is caught. */
  r.dynamic_shared = malloc(shared_bytes ? shared_bytes : 1);
  int *order = malloc((size_t)r.n_threads * sizeof *order);
  if (!r.dynamic_shared || !order) {
    free(r.dynamic_shared);
    free(order);
    snprintf(msg, msg_cap, "kernel %s: out of host memory", name);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  run_call = call;
  run_args = args;

  /* Blocks in a random order: i -> (a*i + c) mod G with a coprime to G. */
  uint64_t G = (uint64_t)grid[0] * grid[1] * grid[2];
  uint64_t a = G > 1 ? fc_random() % G : 1, c = G > 1 ? fc_random() % G : 0;
  while (G > 1 && gcd(a, G) != 1) a = (a + 1) % G;
  if (a == 0) a = 1;
  CUresult res = CUDA_SUCCESS;
  for (uint64_t i = 0; i < G && res == CUDA_SUCCESS; i++) {
    uint64_t b = (uint64_t)(((unsigned __int128)a * i + c) % G);
    unsigned bid[3] = {(unsigned)(b % grid[0]), (unsigned)(b / grid[0] % grid[1]),
                       (unsigned)(b / ((uint64_t)grid[0] * grid[1]))};
    res = run_block(&r, bid, order);
  }
  em_host_thread = NULL;
  free(order);
  free(r.dynamic_shared);
  return res;
}

/* Unmaps the fiber stacks (fakecuda_reset and unload). */
void fc_exec_release(void) {
  for (int i = 0; i < MAX_BLOCK_THREADS; i++) fc_fiber_destroy(&threads[i].fiber); /* no-op if never mapped */
}
