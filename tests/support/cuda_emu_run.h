/* Launches on the emulated device (cuda_emu_run.c), for the driver double. */
#ifndef LOOM_TESTS_CUDA_EMU_RUN_H
#define LOOM_TESTS_CUDA_EMU_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_emu_abi.h"

#define EMU_MAX_PARAMS 320 /* a kernel's slots (LM_KERNEL_MAX_SLOTS) and its sizes */

/* Runs kernel fn over the grid, every parameter 8 bytes, pointing the
 * kernel's object's runtime variable (*rt) at the emulator's. False, with
 * the reason, when the launch cannot finish. */
bool emu_launch(void *fn, lm_emu_runtime **rt, const unsigned grid[3], const unsigned block[3],
                int nparams, const uint64_t *params, char *err, size_t errlen);

#endif
