/* Counters for loom_get_stats: relaxed atomics, cheap on every path. */
#include <stdatomic.h>
#include <time.h>

#include "backends/llvm/llvm_backend.h"
#include "runtime/cuda.h"
#include "runtime/runtime.h"

static _Atomic uint64_t counters[LM_NUM_STATS];
static _Atomic int64_t bytes_live, bytes_peak, device_live, device_peak;

void lm_stat_add(lm_stat which, uint64_t amount) {
  atomic_fetch_add_explicit(&counters[which], amount, memory_order_relaxed);
}

static void track(_Atomic int64_t *live, _Atomic int64_t *peak_of, int64_t delta) {
  int64_t now = atomic_fetch_add_explicit(live, delta, memory_order_relaxed) + delta;
  int64_t peak = atomic_load_explicit(peak_of, memory_order_relaxed);
  while (now > peak && !atomic_compare_exchange_weak_explicit(
                           peak_of, &peak, now, memory_order_relaxed, memory_order_relaxed)) {
  }
}

void lm_stat_bytes(int64_t delta) { track(&bytes_live, &bytes_peak, delta); }
void lm_stat_device_bytes(int64_t delta) { track(&device_live, &device_peak, delta); }

uint64_t lm_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

loom_stats loom_get_stats(void) {
  loom_stats s;
  s.graphs_compiled = atomic_load(&counters[LM_STAT_GRAPHS_COMPILED]);
  s.graph_cache_hits = atomic_load(&counters[LM_STAT_GRAPH_CACHE_HITS]);
  s.kernels_compiled = atomic_load(&counters[LM_STAT_KERNELS_COMPILED]);
  s.kernel_cache_hits = atomic_load(&counters[LM_STAT_KERNEL_CACHE_HITS]);
  s.disk_cache_hits = atomic_load(&counters[LM_STAT_DISK_CACHE_HITS]);
  s.kernels_launched = atomic_load(&counters[LM_STAT_KERNELS_LAUNCHED]);
  s.gemm_calls = atomic_load(&counters[LM_STAT_GEMM_CALLS]);
  s.compile_ns = atomic_load(&counters[LM_STAT_COMPILE_NS]);
  s.realizations = atomic_load(&counters[LM_STAT_REALIZATIONS]);
  s.nodes_recorded = atomic_load(&counters[LM_STAT_NODES_RECORDED]);
  s.bytes_live = (uint64_t)atomic_load(&bytes_live);
  s.bytes_peak = (uint64_t)atomic_load(&bytes_peak);
  s.device_bytes_live = (uint64_t)atomic_load(&device_live);
  s.device_bytes_peak = (uint64_t)atomic_load(&device_peak);
  s.kernels_loaded = lm_llvm_objects_loaded() + lm_cuda_modules_loaded();
  s.kernels_unloaded = atomic_load(&counters[LM_STAT_KERNELS_UNLOADED]);
  s.generic_kernels_compiled = atomic_load(&counters[LM_STAT_GENERIC_KERNELS_COMPILED]);
  s.generic_kernel_uses = atomic_load(&counters[LM_STAT_GENERIC_KERNEL_USES]);
  s.program_sizes_planned = atomic_load(&counters[LM_STAT_PROGRAM_SIZES_PLANNED]);
  s.program_sizes_from_template = atomic_load(&counters[LM_STAT_PROGRAM_SIZES_FROM_TEMPLATE]);
  s.in_place_updates = atomic_load(&counters[LM_STAT_IN_PLACE_UPDATES]);
  s.collectives_run = atomic_load(&counters[LM_STAT_COLLECTIVES_RUN]);
  s.collectives_overlapped = atomic_load(&counters[LM_STAT_COLLECTIVES_OVERLAPPED]);
  s.collective_bytes = atomic_load(&counters[LM_STAT_COLLECTIVE_BYTES]);
  s.gemms_from_windows = atomic_load(&counters[LM_STAT_GEMMS_FROM_WINDOWS]);
  return s;
}

void loom_reset_stats(void) {
  for (int i = 0; i < LM_NUM_STATS; i++) atomic_store(&counters[i], 0);
  atomic_store(&bytes_peak, atomic_load(&bytes_live));
  atomic_store(&device_peak, atomic_load(&device_live));
}
