/* Fibers (fakecuda_fiber.h). One scheduler at a time: kernels run under the
 * fake's lock, so the scheduler's saved state can be a plain static.
 *
 * Sanitizers and valgrind must be told about stack switches, or they take
 * the fiber stacks for overflows of the thread's own stack: AddressSanitizer
 * through __sanitizer_start/finish_switch_fiber, valgrind through
 * VALGRIND_STACK_REGISTER. */
#include "fakecuda_fiber.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <valgrind/valgrind.h>

#if defined(__SANITIZE_ADDRESS__)
#define FC_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FC_ASAN 1
#endif
#endif
#ifdef FC_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
/* Instrumented frames are larger (red zones around every local array). */
#define FIBER_STACK (512u * 1024u)
#else
#define FIBER_STACK (128u * 1024u)
#endif

#if defined(__x86_64__) && !defined(FAKECUDA_UCONTEXT)
#define FC_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif

static fc_fiber *current;
#ifdef FC_ASAN
static const void *sched_stack_bottom; /* for the sanitizer: the scheduler's stack */
static size_t sched_stack_size;
#endif

/* ------------------------------------------------------- the switch --- */

#ifdef FC_ASM_SWITCH
/* fc_ctx_switch(save, to): saves the callee-saved registers (System V
 * AMD64: rbx, rbp, r12-r15, and the MXCSR / x87 control words) on the
 * current stack, stores the stack pointer in *save, loads `to` and pops the
 * same from there. A fresh fiber's stack is laid out so that this "returns"
 * into fc_ctx_entry with r12 = the fiber and r13 = the function to call. */
__asm__(".text\n"
        ".globl fc_ctx_switch\n"
        ".hidden fc_ctx_switch\n"
        ".type fc_ctx_switch,@function\n"
        "fc_ctx_switch:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  subq $8, %rsp\n"
        "  stmxcsr (%rsp)\n"
        "  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n"
        "  fldcw 4(%rsp)\n"
        "  addq $8, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size fc_ctx_switch, .-fc_ctx_switch\n"
        ".globl fc_ctx_entry\n"
        ".hidden fc_ctx_entry\n"
        ".type fc_ctx_entry,@function\n"
        "fc_ctx_entry:\n"
        "  movq %r12, %rdi\n"
        "  callq *%r13\n"
        "  ud2\n"
        ".size fc_ctx_entry, .-fc_ctx_entry\n");
void fc_ctx_switch(void **save, void *to);
void fc_ctx_entry(void);
static void *sched_sp;
#else
static ucontext_t sched_uctx;
#endif

static void switch_in(fc_fiber *f) {
#ifdef FC_ASAN
  void *fake = NULL;
  __sanitizer_start_switch_fiber(&fake, f->stack, f->stack_size);
#endif
#ifdef FC_ASM_SWITCH
  fc_ctx_switch(&sched_sp, f->sp);
#else
  swapcontext(&sched_uctx, (ucontext_t *)f->uctx);
#endif
#ifdef FC_ASAN
  __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
}

/* From fiber f back to the scheduler; `final` when f will never resume. */
static void switch_out(fc_fiber *f, int final) {
#ifdef FC_ASAN
  __sanitizer_start_switch_fiber(final ? NULL : &f->asan_fake_stack, sched_stack_bottom, sched_stack_size);
#else
  (void)final;
#endif
#ifdef FC_ASM_SWITCH
  fc_ctx_switch(&f->sp, sched_sp);
#else
  swapcontext((ucontext_t *)f->uctx, &sched_uctx);
#endif
#ifdef FC_ASAN
  __sanitizer_finish_switch_fiber(f->asan_fake_stack, &sched_stack_bottom, &sched_stack_size);
#endif
}

/* Every fiber starts here, on its own stack. */
static void fiber_main(void *p) {
  fc_fiber *f = p;
#ifdef FC_ASAN
  __sanitizer_finish_switch_fiber(NULL, &sched_stack_bottom, &sched_stack_size);
#endif
  f->entry(f->arg);
  f->finished = 1;
  switch_out(f, 1);
  abort(); /* a finished fiber is never resumed */
}

#ifndef FC_ASM_SWITCH
static void uctx_main(void) { fiber_main(current); }
#endif

/* ------------------------------------------------------------ stacks --- */

int fc_fiber_init(fc_fiber *f) {
  memset(f, 0, sizeof *f);
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t total = FIBER_STACK + page;
  char *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return -1;
  /* The guard page: a kernel thread that overflows its stack faults at once
   * instead of writing into the next fiber's. */
  mprotect(m, page, PROT_NONE);
  f->stack = m + page;
  f->stack_size = FIBER_STACK;
  f->valgrind_id = VALGRIND_STACK_REGISTER(f->stack, f->stack + f->stack_size);
#ifndef FC_ASM_SWITCH
  f->uctx = calloc(1, sizeof(ucontext_t));
  if (!f->uctx) {
    fc_fiber_destroy(f);
    return -1;
  }
#endif
  return 0;
}

void fc_fiber_destroy(fc_fiber *f) {
  if (!f->stack) return;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  VALGRIND_STACK_DEREGISTER(f->valgrind_id);
  munmap(f->stack - page, f->stack_size + page);
  free(f->uctx);
  memset(f, 0, sizeof *f);
}

void fc_fiber_start(fc_fiber *f, void (*entry)(void *), void *arg) {
#ifdef FC_ASAN
  /* A fiber abandoned in the middle of a function left its frames' red
   * zones poisoned: clean the stack for its next thread. (One that returned
   * unpoisoned its frames on the way out.) */
  if (f->entry && !f->finished) ASAN_UNPOISON_MEMORY_REGION(f->stack, f->stack_size);
#endif
  f->entry = entry;
  f->arg = arg;
  f->finished = 0;
  f->asan_fake_stack = NULL;
#ifdef FC_ASM_SWITCH
  /* From the top: 16 bytes of slack, the return address (fc_ctx_entry), six
   * registers (rbp = 0 ends frame-pointer walks; r12 = fiber; r13 = the C
   * entry point) and the MXCSR / x87 control words of the scheduler. The
   * stack pointer at fc_ctx_entry's call is then 16-byte aligned. */
  uint64_t *top = (uint64_t *)(void *)((uintptr_t)(f->stack + f->stack_size) & ~(uintptr_t)15);
  uint64_t *sp = top - 10;
  uint32_t ctl[2];
  __asm__ volatile("stmxcsr %0\n fnstcw %1" : "=m"(ctl[0]), "=m"(ctl[1]));
  memcpy(&sp[0], ctl, 8);
  sp[1] = 0;                            /* r15 */
  sp[2] = 0;                            /* r14 */
  sp[3] = (uint64_t)(uintptr_t)fiber_main; /* r13 */
  sp[4] = (uint64_t)(uintptr_t)f;       /* r12 */
  sp[5] = 0;                            /* rbx */
  sp[6] = 0;                            /* rbp */
  sp[7] = (uint64_t)(uintptr_t)fc_ctx_entry;
  f->sp = sp;
#else
  ucontext_t *u = f->uctx;
  getcontext(u);
  u->uc_stack.ss_sp = f->stack;
  u->uc_stack.ss_size = f->stack_size;
  u->uc_link = NULL;
  makecontext(u, uctx_main, 0);
#endif
}

void fc_fiber_resume(fc_fiber *f) {
  fc_fiber *prev = current;
  current = f;
  switch_in(f);
  current = prev;
}

void fc_fiber_yield(void) { switch_out(current, 0); }
