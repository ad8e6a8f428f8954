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
 * launch with CUDA_ERROR_LAUNCH_FAILED and a message that says which.
 *
 * Device addresses a kernel reads from device memory (a multi-tensor
 * kernel's table) come through EM_DEVICE_ADDR, em_host_device_addr here:
 * translated against the launch's context like pointer parameters, and
 * remembered for the launch (a set: each thread reads the same few), so
 * that the guard zones behind them are checked after the launch as pointer
 * parameters' are. One the double cannot translate stops its thread where
 * it was read (the fiber is parked and never resumed, as a faulting GPU
 * thread never goes on) and fails the launch with
 * CUDA_ERROR_ILLEGAL_ADDRESS, naming the entry and why; a real GPU would
 * fault there too, when the kernel touched the address. */
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

enum { T_RUNNING, T_WAITING, T_DONE, T_FAULT };

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
  const struct CUctx_st *ctx;
  const fc_kernel_def *def;
  const uint64_t (*values)[2];
  unsigned block[3], grid[3];
  int n_threads;
  unsigned char *dynamic_shared;
  size_t dynamic_bytes;
  char *msg;
  size_t msg_cap;
  unsigned bid[3]; /* the block running */
} launch_run;

static launch_run *current_run; /* blocks run one at a time, under the fake's lock */

static CUresult block_fail_code(const launch_run *r, const unsigned bid[3], CUresult code, const char *what) {
  snprintf(r->msg, r->msg_cap, "kernel %s, block (%u,%u,%u) of grid (%u,%u,%u), block (%u,%u,%u): %s", r->name, bid[0],
           bid[1], bid[2], r->grid[0], r->grid[1], r->grid[2], r->block[0], r->block[1], r->block[2], what);
  return code;
}

static CUresult block_fail(const launch_run *r, const unsigned bid[3], const char *what) {
  return block_fail_code(r, bid, CUDA_ERROR_LAUNCH_FAILED, what);
}

/* ------------------------------------------- addresses in device memory --- */

/* The device addresses EM_DEVICE_ADDR translated in this launch, with their
 * host addresses: open addressing, linear probing, a power-of-two table at
 * most half full. */
typedef struct addr_slot {
  CUdeviceptr dev; /* 0: empty */
  void *host;
} addr_slot;

static addr_slot *addr_slots;
static size_t addr_cap, addr_count;

static size_t addr_hash(CUdeviceptr p) { return (size_t)((p >> 2) * 0x9e3779b97f4a7c15ull >> 17); }

static void *addr_find(CUdeviceptr p) {
  if (!addr_cap) return NULL;
  for (size_t i = addr_hash(p) & (addr_cap - 1);; i = (i + 1) & (addr_cap - 1)) {
    if (addr_slots[i].dev == p) return addr_slots[i].host;
    if (!addr_slots[i].dev) return NULL;
  }
}

static int addr_insert(CUdeviceptr p, void *host) {
  if (2 * (addr_count + 1) > addr_cap) {
    size_t cap = addr_cap ? 2 * addr_cap : 64;
    addr_slot *old = addr_slots, *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    size_t old_cap = addr_cap;
    addr_slots = t, addr_cap = cap, addr_count = 0;
    for (size_t i = 0; i < old_cap; i++)
      if (old[i].dev) addr_insert(old[i].dev, old[i].host);
    free(old);
  }
  size_t i = addr_hash(p) & (addr_cap - 1);
  while (addr_slots[i].dev) i = (i + 1) & (addr_cap - 1);
  addr_slots[i] = (addr_slot){p, host};
  addr_count++;
  return 0;
}

static void addr_clear(void) {
  if (addr_count) memset(addr_slots, 0, addr_cap * sizeof *addr_slots);
  addr_count = 0;
}

/* Where the entry the kernel read lies: in which pointer parameter's
 * allocation, at which byte from that parameter (the nearest one at or
 * below it in the same allocation), else at which device address. */
static void describe_entry(const launch_run *r, const em_i64 *entry, char *out, size_t cap) {
  CUdeviceptr base, at = fc_mem_device_of(entry, &base);
  if (!at) {
    snprintf(out, cap, "the entry at host address %p (not in device memory: a copy in a local or shared variable?)",
             (const void *)entry);
    return;
  }
  int best = -1;
  CUdeviceptr best_dp = 0;
  for (int i = 0; i < r->def->n_params; i++) {
    if (!r->def->param_is_ptr[i]) continue;
    CUdeviceptr dp;
    memcpy(&dp, r->values[i], sizeof dp);
    if (dp && dp <= at && dp >= best_dp && fc_mem_base_of(dp) == base) best = i, best_dp = dp;
  }
  if (best >= 0)
    snprintf(out, cap, "the table entry at byte %llu of parameter %d (%s)", at - best_dp, best,
             r->def->param_name[best]);
  else
    snprintf(out, cap, "the entry at device address 0x%llx (byte %llu of the allocation at 0x%llx)", at, at - base,
             base);
}

/* Stops the running thread for good: the block's scheduler sees T_FAULT and
 * fails the launch with the message already written. */
static void *thread_fault(const em_i64 *entry, CUdeviceptr p, const char *why) {
  launch_run *r = current_run;
  char where[256], what[640];
  describe_entry(r, entry, where, sizeof where);
  snprintf(what, sizeof what, "thread (%d,%d,%d): EM_DEVICE_ADDR of 0x%llx read from %s: %s", running->st.tid[0],
           running->st.tid[1], running->st.tid[2], p, where, why);
  block_fail_code(r, r->bid, CUDA_ERROR_ILLEGAL_ADDRESS, what);
  running->state = T_FAULT;
  fc_fiber_yield(); /* never resumed */
  return NULL;
}

void *em_host_device_addr(const em_i64 *entry) {
  CUdeviceptr p;
  memcpy(&p, entry, sizeof p);
  if (!p || !running) return NULL; /* NULL stays NULL; outside a launch there is nothing to translate against */
  void *h = addr_find(p);
  if (h) return h;
  char why[256];
  if (fc_mem_translate(current_run->ctx, p, &h, why, sizeof why) != CUDA_SUCCESS) return thread_fault(entry, p, why);
  if (addr_insert(p, h) != 0) return thread_fault(entry, p, "the test double ran out of host memory");
  return h;
}

/* After the launch: the guard zones behind every address read through EM_DEVICE_ADDR. */
static CUresult check_read_addresses(const launch_run *r) {
  for (size_t i = 0; i < addr_cap; i++) {
    if (!addr_slots[i].dev) continue;
    char why[256];
    if (fc_mem_check_guards(addr_slots[i].dev, why, sizeof why) != CUDA_SUCCESS) {
      snprintf(r->msg, r->msg_cap, "kernel %s, device address 0x%llx read from device memory (EM_DEVICE_ADDR): %s",
               r->name, addr_slots[i].dev, why);
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
  }
  return CUDA_SUCCESS;
}

static CUresult run_block(launch_run *r, const unsigned bid[3], int *order) {
  memcpy(r->bid, bid, sizeof r->bid);
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
      if (t->state == T_FAULT) return CUDA_ERROR_ILLEGAL_ADDRESS; /* thread_fault wrote the message */
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

CUresult fc_exec_launch(const struct CUctx_st *ctx, const fc_kernel_def *d, const uint64_t (*values)[2],
                        void *const *args, const unsigned grid[3], const unsigned block[3], size_t shared_bytes,
                        char *msg, size_t msg_cap) {
  msg[0] = '\0';
  const char *name = d->name;
  launch_run r = {name, ctx, d, values, {block[0], block[1], block[2]}, {grid[0], grid[1], grid[2]},
                  (int)(block[0] * block[1] * block[2]), NULL, shared_bytes, msg, msg_cap, {0, 0, 0}};
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
  run_call = d->call;
  run_args = args;
  current_run = &r;
  addr_clear(); /* memory may have been freed since the last launch */

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
  if (res == CUDA_SUCCESS) res = check_read_addresses(&r);
  addr_clear();
  current_run = NULL;
  em_host_thread = NULL;
  free(order);
  free(r.dynamic_shared);
  return res;
}

/* Unmaps the fiber stacks (fakecuda_reset and unload). */
void fc_exec_release(void) {
  for (int i = 0; i < MAX_BLOCK_THREADS; i++) fc_fiber_destroy(&threads[i].fiber); /* no-op if never mapped */
  free(addr_slots);
  addr_slots = NULL;
  addr_cap = addr_count = 0;
}
