/* Fibers for the test double's kernel execution (fakecuda_exec.c): each GPU
 * thread of a block runs on a fiber of its own, so that EM_SYNC() can stop a
 * thread in the middle of a loop or a helper function and let the block's
 * other threads reach the barrier. Cooperative and single-OS-thread: the
 * scheduler resumes one fiber at a time and a fiber runs until it yields or
 * returns. A switch costs a few nanoseconds (hand-written for x86-64, where
 * CI runs; ucontext elsewhere), which matters: a launch over a million
 * elements starts a million fibers. */
#ifndef FAKECUDA_FIBER_H
#define FAKECUDA_FIBER_H

#include <stddef.h>

typedef struct fc_fiber {
  void *sp;         /* saved stack pointer while switched out (x86-64) */
  void *uctx;       /* ucontext_t on other machines */
  char *stack;      /* lowest usable byte (a guard page lies below) */
  size_t stack_size;
  unsigned valgrind_id;
  void *asan_fake_stack;
  int finished;     /* the entry function returned */
  void (*entry)(void *);
  void *arg;
} fc_fiber;

/* Maps a stack (with a guard page below it) for f. 0 or -1 when out of memory. */
int fc_fiber_init(fc_fiber *f);
void fc_fiber_destroy(fc_fiber *f);

/* Prepares f to run entry(arg) from the top of its stack on the next resume;
 * whatever f was doing before is abandoned. */
void fc_fiber_start(fc_fiber *f, void (*entry)(void *), void *arg);

/* From the scheduler: runs f until it yields or its entry returns
 * (then f->finished is 1). */
void fc_fiber_resume(fc_fiber *f);

/* From inside a fiber: back to the scheduler, until the next resume. */
void fc_fiber_yield(void);

#endif
