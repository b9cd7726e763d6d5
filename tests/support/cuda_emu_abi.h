/* What the emulated device's runtime (cuda_emu_run.c, in the driver double)
 * and the kernels compiled against cuda_emu.h share: plain C, the same
 * layout on both sides. */
#ifndef LOOM_TESTS_CUDA_EMU_ABI_H
#define LOOM_TESTS_CUDA_EMU_ABI_H

typedef struct lm_emu_dim3 {
  unsigned x, y, z;
} lm_emu_dim3;

/* One CUDA thread (a fiber). */
typedef struct lm_emu_thread {
  lm_emu_dim3 thread_idx;
} lm_emu_thread;

typedef struct lm_emu_runtime {
  lm_emu_thread *current; /* the fiber running now */
  lm_emu_dim3 block_idx, block_dim, grid_dim;
  void (*sync_block)(void);
  /* the value of lane (this lane ^ lane_mask) of this warp, as 8 bytes */
  unsigned long long (*shfl_xor)(unsigned long long bits, int lane_mask);
} lm_emu_runtime;

#endif
