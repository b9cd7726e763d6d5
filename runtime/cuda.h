/*
 * The CUDA half of the runtime (runtime/cuda/cuda_*.c, or runtime/cuda/cuda_off.c
 * in a -DLOOM_CUDA=OFF build), as the rest of the runtime sees it: whether a
 * device is usable, device memory, copies, and running a plan on a
 * device. It compiles kernels through backends/nvrtc.
 *
 * Device pointers travel as void * (a CUdeviceptr's value): node->data of a
 * tensor on LOOM_CUDA(n) is one, never dereferenced on the host.
 *
 * Each device has one stream. Kernels, copies to the device and frees are
 * queued on it without waiting; only a copy to the host (loom_item,
 * loom_copy_to_host, loom_to(t, LOOM_CPU), printing, saving) waits for it.
 * A freed block may be handed out again at once: whatever uses it next is
 * queued behind whatever used it before, on the same stream.
 *
 * Functions returning a status have recorded the error (lm_fail), its
 * message starting with `op`.
 */
#ifndef LOOM_RUNTIME_CUDA_H
#define LOOM_RUNTIME_CUDA_H

#include "runtime/exec.h"

/* Driver, a device and NVRTC all present; else false and why. */
bool lm_cuda_ready(char *why, size_t whylen);
int lm_cuda_count(void);
/* CUDA modules loaded now (kernels and GEMMs, every device). */
size_t lm_cuda_modules_loaded(void);

loom_status lm_cuda_alloc(const char *op, int dev, size_t bytes, void **out);
void lm_cuda_free(int dev, void *ptr, size_t bytes);
/* Returns every cached free block of every device to the driver. */
void lm_cuda_trim(void);
/* bytes bytes from src on device `from` to dst on device `to`, at least one
 * of them a CUDA device. Waits when `to` is the CPU. */
loom_status lm_cuda_copy(const char *op, loom_device to, void *dst, loom_device from,
                         const void *src, size_t bytes);
/* Sets bytes bytes at ptr on device dev to zero (queued). */
loom_status lm_cuda_zero(const char *op, int dev, void *ptr, size_t bytes);
/* Waits for everything queued on device dev. */
loom_status lm_cuda_sync(const char *op, int dev);
/* Device dev's peak memory bandwidth in GB/s, 0 when unknown. */
double lm_cuda_peak_gbs(int dev);

/* NCCL (runtime/cuda/cuda_nccl.c): collectives on device buffers, on the
 * device's stream. Whether it loaded (libnccl.so.2 or $LOOM_NCCL, 2.10 or
 * later; LOOM_NCCL=0: off) and its version, or why not (fixed text). */
bool lm_nccl_available(const char **about);
/* Whether NCCL runs collective c (its dtype; a gather along the first axis). */
bool lm_nccl_runs(const lm_collective *c);
/* Communicators, one per device: whether dev has one for a world of
 * `world`; rank 0 makes the unique id, every rank joins with it (blocking
 * until all have). False with why in err. */
#define LM_NCCL_ID_BYTES 128
bool lm_nccl_has_comm(int dev, int world);
bool lm_nccl_make_id(unsigned char *id, char *err, size_t errlen);
bool lm_nccl_join(int dev, int rank, int world, const unsigned char *id, char *err, size_t errlen);
/* Runs collective c on dev's buffers (bufs by position, out the step's) and
 * waits for the stream within timeout_s; on a failure or timeout the
 * communicator is aborted and err says why. */
bool lm_nccl_run(int dev, const lm_collective *c, const void *const *bufs, void *out,
                 double timeout_s, char *err, size_t errlen);

/* Compiles (or finds in the caches) the device code of every step of p for
 * device dev; sets each step's device_code. With vary (a plan template's
 * plan), kernel step i is generalized over the sizes vary[i] marks
 * (lm_kernel_generic_lifted) instead of by the shape records. */
loom_status lm_cuda_exec_compile(lm_plan *p, int dev, unsigned char *const *vary);
/* How many run-time sizes a CUDA kernel takes at most (its parameters stay
 * within a launch's 4 KiB); 0 when built without CUDA. */
int lm_cuda_max_sizes(void);
/* lm_exec_run for a program compiled by lm_cuda_exec_compile. */
loom_status lm_cuda_exec_run(const lm_exec *x);

#endif
