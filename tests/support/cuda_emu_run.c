/*
 * The emulated device's launches (part of the driver double, tests only):
 * every CUDA thread of a block is a fiber on the launching host thread, and
 * the blocks run one after another. Fibers switch only at __syncthreads and
 * at warp shuffles (cuda_emu.h): the scheduler runs every ready fiber until
 * it waits or returns, then releases a warp whose 32 lanes all wait at a
 * shuffle, else the block when every thread still running waits at the
 * barrier. Anything else can never finish on a GPU either (a shuffle some
 * lanes never reach, a barrier inside a branch), and fails the launch.
 *
 * The context switch is a few lines of x86-64 assembly (callee-saved
 * registers and the stack pointer): swapcontext makes a system call per
 * switch, and a reduction switches about twenty times per thread.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cuda_emu_abi.h"
#include "cuda_emu_run.h"

#if !defined(__x86_64__)
#error "the emulated CUDA device switches fibers with x86-64 assembly"
#endif

/* emu_switch(&save, to): saves the callee-saved registers on this stack and
 * its pointer in *save, then continues the fiber whose pointer is `to`. */
void emu_switch(void **save, void *to);
__asm__(".text\n"
        ".p2align 4\n"
        ".type emu_switch,@function\n"
        "emu_switch:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size emu_switch, .-emu_switch\n");

#define STACK_BYTES (128 << 10)
#define GUARD_BYTES 4096 /* below each stack, unmapped: an overflow faults */
#define MAX_THREADS 1024

typedef enum state { READY, AT_BARRIER, AT_SHUFFLE, DONE } state;

typedef struct fiber {
  lm_emu_thread t; /* what threadIdx reads; first, so that a thread is its fiber */
  void *sp;
  state st;
} fiber;

/* One launch at a time: the driver double holds its lock around launches. */
static struct {
  fiber fibers[MAX_THREADS];
  char *stacks; /* MAX_THREADS guarded stacks, mapped at the first launch */
  unsigned long long slots[MAX_THREADS];
  int nthreads;
  void *scheduler_sp;
  lm_emu_runtime rt;
  void *fn;
  uint64_t params[EMU_MAX_PARAMS];
} emu;

/* The fiber running now: the runtime's current thread is its first member. */
static fiber *current(void) { return (fiber *)emu.rt.current; }

static void wait_as(state st) {
  fiber *f = current();
  f->st = st;
  emu_switch(&f->sp, emu.scheduler_sp);
}

static void sync_block(void) { wait_as(AT_BARRIER); }

static unsigned long long shfl_xor(unsigned long long bits, int lane_mask) {
  int i = (int)(current() - emu.fibers);
  emu.slots[i] = bits;
  wait_as(AT_SHUFFLE);
  int partner = (i & ~31) | ((i ^ lane_mask) & 31);
  unsigned long long got = partner < emu.nthreads ? emu.slots[partner] : bits;
  wait_as(AT_SHUFFLE); /* no lane writes its slot again before every lane has read */
  return got;
}

/* Every kernel parameter is 8 bytes (pointers, long long). The call passes
 * EMU_MAX_PARAMS of them: under the x86-64 System V convention the caller
 * owns the stack arguments, so a callee taking fewer never sees the rest. */
#define EMU_TYPES8 uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t
#define EMU_TYPES64                                                                                \
  EMU_TYPES8, EMU_TYPES8, EMU_TYPES8, EMU_TYPES8, EMU_TYPES8, EMU_TYPES8, EMU_TYPES8, EMU_TYPES8
#define EMU_ARGS8(i) p[i], p[i + 1], p[i + 2], p[i + 3], p[i + 4], p[i + 5], p[i + 6], p[i + 7]
#define EMU_ARGS64(i)                                                                              \
  EMU_ARGS8(i), EMU_ARGS8(i + 8), EMU_ARGS8(i + 16), EMU_ARGS8(i + 24), EMU_ARGS8(i + 32),         \
      EMU_ARGS8(i + 40), EMU_ARGS8(i + 48), EMU_ARGS8(i + 56)
typedef void (*kernel_fn)(EMU_TYPES64, EMU_TYPES64, EMU_TYPES64, EMU_TYPES64, EMU_TYPES64);
_Static_assert(EMU_MAX_PARAMS == 5 * 64, "kernel_fn passes EMU_MAX_PARAMS arguments");

static void fiber_main(void) {
  const uint64_t *p = emu.params;
  ((kernel_fn)emu.fn)(EMU_ARGS64(0), EMU_ARGS64(64), EMU_ARGS64(128), EMU_ARGS64(192),
                      EMU_ARGS64(256));
  current()->st = DONE;
  emu_switch(&current()->sp, emu.scheduler_sp);
  abort(); /* a finished fiber is never resumed */
}

/* A fresh stack whose first switch "returns" into fiber_main with the
 * alignment of a function entry (rsp = 8 mod 16). */
static void *fresh_stack(int i) {
  uintptr_t top =
      (uintptr_t)(emu.stacks + (size_t)(i + 1) * (GUARD_BYTES + STACK_BYTES)) & ~(uintptr_t)15;
  void **sp = (void **)(top - 64);
  memset(sp, 0, 64);
  sp[6] = (void *)fiber_main; /* after the six saved registers */
  return sp;
}

/* Every fiber's stack, with an inaccessible page below it. */
static bool map_stacks(void) {
  size_t each = GUARD_BYTES + STACK_BYTES, bytes = (size_t)MAX_THREADS * each;
  char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  for (int i = 0; i < MAX_THREADS; i++)
    if (mprotect(p + (size_t)i * each, GUARD_BYTES, PROT_NONE) != 0) {
      munmap(p, bytes);
      return false;
    }
  emu.stacks = p;
  return true;
}

/* Releases what can go on; false when nothing can (the reason in err). */
static bool release(char *err, size_t errlen) {
  for (int w = 0; w * 32 < emu.nthreads; w++) {
    int lanes = emu.nthreads - w * 32 < 32 ? emu.nthreads - w * 32 : 32, waiting = 0, done = 0;
    for (int l = 0; l < lanes; l++) {
      state st = emu.fibers[w * 32 + l].st;
      waiting += st == AT_SHUFFLE, done += st == DONE;
    }
    if (waiting == 0) continue;
    if (waiting < lanes) {
      snprintf(err, errlen,
               "warp %d of block (%u, %u, %u): %d lanes wait at a shuffle, %d have returned and "
               "%d wait at __syncthreads",
               w, emu.rt.block_idx.x, emu.rt.block_idx.y, emu.rt.block_idx.z, waiting, done,
               lanes - waiting - done);
      return false;
    }
    for (int l = 0; l < lanes; l++) emu.fibers[w * 32 + l].st = READY;
    return true;
  }
  int at_barrier = 0, done = 0;
  for (int i = 0; i < emu.nthreads; i++)
    at_barrier += emu.fibers[i].st == AT_BARRIER, done += emu.fibers[i].st == DONE;
  if (at_barrier == 0) return false; /* all done */
  for (int i = 0; i < emu.nthreads; i++)
    if (emu.fibers[i].st == AT_BARRIER) emu.fibers[i].st = READY;
  return true;
}

static bool run_block(char *err, size_t errlen) {
  unsigned bx = emu.rt.block_dim.x, by = emu.rt.block_dim.y;
  for (int i = 0; i < emu.nthreads; i++) {
    fiber *f = &emu.fibers[i];
    f->t.thread_idx =
        (lm_emu_dim3){(unsigned)i % bx, ((unsigned)i / bx) % by, (unsigned)i / (bx * by)};
    f->st = READY;
    f->sp = fresh_stack(i);
  }
  for (;;) {
    for (int i = 0; i < emu.nthreads; i++) {
      fiber *f = &emu.fibers[i];
      if (f->st != READY) continue;
      emu.rt.current = &f->t;
      emu_switch(&emu.scheduler_sp, f->sp);
    }
    err[0] = '\0';
    if (!release(err, errlen)) return err[0] == '\0';
  }
}

bool emu_launch(void *fn, lm_emu_runtime **rt, const unsigned grid[3], const unsigned block[3],
                int nparams, const uint64_t *params, char *err, size_t errlen) {
  int threads = (int)(block[0] * block[1] * block[2]);
  if (threads <= 0 || threads > MAX_THREADS || nparams > EMU_MAX_PARAMS) {
    snprintf(err, errlen, "%d threads per block and %d parameters are more than %d and %d", threads,
             nparams, MAX_THREADS, EMU_MAX_PARAMS);
    return false;
  }
  if (!emu.stacks && !map_stacks()) {
    snprintf(err, errlen, "cannot map the fibers' stacks");
    return false;
  }
  emu.fn = fn;
  emu.nthreads = threads;
  memset(emu.params, 0, sizeof emu.params);
  memcpy(emu.params, params, sizeof(uint64_t) * (size_t)nparams);
  emu.rt.block_dim = (lm_emu_dim3){block[0], block[1], block[2]};
  emu.rt.grid_dim = (lm_emu_dim3){grid[0], grid[1], grid[2]};
  emu.rt.sync_block = sync_block;
  emu.rt.shfl_xor = shfl_xor;
  *rt = &emu.rt;
  for (unsigned z = 0; z < grid[2]; z++)
    for (unsigned y = 0; y < grid[1]; y++)
      for (unsigned x = 0; x < grid[0]; x++) {
        emu.rt.block_idx = (lm_emu_dim3){x, y, z};
        if (!run_block(err, errlen)) return false;
      }
  return true;
}
