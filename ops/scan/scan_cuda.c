/* Scan steps on a CUDA device: the device code (ops/scan/scan.cu through
 * ops/scan/scan_nvrtc.c) and its launches. */
#include "ops/scan/scan_cuda.h"

#include "backends/nvrtc/nvrtc_backend.h"
#include "ops/scan/scan_nvrtc.h"
#include "runtime/cuda.h"

/* A scan (ops/scan/scan.cu's kernel): rows (inner 1) a block per part of a row,
 * other dims a thread per part of a chain. Where the chains are too few to
 * give each multiprocessor SCAN_BLOCKS_PER_SM blocks, each is cut into parts
 * (of at least a tile, 2,048 values, in a row; 64 values otherwise; at most
 * SCAN_MAX_PARTS): their totals into scratch first (phase 0), then the sums
 * (phase 1). */
#define SCAN_BLOCKS_PER_SM 4
#define SCAN_MAX_PARTS 1024
static loom_status run(const lm_exec *x, const lm_step *s) {
  const lm_scan *sc = &s->scan;
  if (s->outer == 0) return LOOM_OK;
  const lm_cu_device *dev = lm_cu_device_at(x->device.index);
  int64_t wanted =
      SCAN_BLOCKS_PER_SM * (dev && dev->multiprocessors > 0 ? dev->multiprocessors : 1);
  bool rows = sc->inner == 1;
  int64_t chains = sc->outer * sc->inner, per = rows ? 1 : LM_CUDA_BLOCK;
  int64_t parts = 1, shortest = rows ? 2048 : 64;
  if (chains < wanted * per && sc->n >= 2 * shortest) {
    parts = (wanted * per + chains - 1) / chains;
    if (parts > sc->n / shortest) parts = sc->n / shortest;
    if (parts > SCAN_MAX_PARTS) parts = SCAN_MAX_PARTS;
  }
  size_t bytes = parts > 1 ? sizeof(uint64_t) * (size_t)(chains * parts) : 0;
  void *partial = NULL;
  loom_status st =
      bytes ? lm_cuda_alloc("loom_realize", x->device.index, bytes, &partial) : LOOM_OK;
  if (st != LOOM_OK) return st;
  uint64_t v[] = {0,
                  lm_cuda_ptr(x->bufs[s->out]),
                  lm_cuda_ptr(x->bufs[sc->in_pos]),
                  lm_cuda_ptr(partial),
                  (uint64_t)sc->n,
                  (uint64_t)sc->inner,
                  (uint64_t)sc->outer,
                  (uint64_t)parts,
                  (uint64_t)sc->dtype,
                  sc->reverse};
  int64_t items = rows ? chains * parts : (chains * parts + LM_CUDA_BLOCK - 1) / LM_CUDA_BLOCK;
  for (uint64_t phase = parts > 1 ? 0 : 1; phase < 2 && st == LOOM_OK; phase++) {
    v[0] = phase;
    st = lm_cuda_launch_step(x, s, lm_cuda_grid_for(x, items), v, (int)(sizeof v / sizeof *v));
  }
  if (bytes) lm_cuda_free(x->device.index, partial, bytes); /* reused only behind these */
  return st;
}

static loom_status code(const lm_plan *p, lm_step *s, int dev, const unsigned char *vary) {
  (void)p, (void)vary;
  return lm_cuda_library_code(dev, "lm_scan_rows", lm_cuda_scan_source, &s->code);
}

const lm_cuda_step_kind lm_scan_cuda_kind = {run, code};
