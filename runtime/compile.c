/* Compiled kernels: the in-memory cache (kernel hash -> function), then the
 * disk cache (object files), then the backend. Compiled code lives as long as
 * the JIT, so in-memory entries are never evicted. */
#include <stdio.h>
#include <stdlib.h>

#include "backends/llvm/llvm_backend.h"
#include "runtime/cache.h"
#include "runtime/compile.h"
#include "runtime/disk_cache.h"
#include "runtime/runtime.h"

static lm_cache kernels = LM_CACHE_INIT(0, NULL);

static bool load_from_disk(lm_hash128 disk_key, const char *symbol, lk_fn *fn) {
  size_t len = 0;
  void *obj = lm_disk_load(disk_key, &len);
  if (!obj) return false;
  char err[512];
  loom_status st = lm_llvm_load_object(obj, len, symbol, fn, err, sizeof err);
  free(obj);
  if (st != LOOM_OK) lm_disk_remove(disk_key); /* valid bytes, unusable code: rebuild */
  return st == LOOM_OK;
}

static loom_status compile(const lk_kernel *k, const char *symbol, lm_hash128 disk_key, lk_fn *fn) {
  char err[1024];
  void *obj = NULL;
  size_t len = 0;
  uint64_t start = lm_now_ns();
  loom_status st = lm_llvm_emit_object(k, symbol, &obj, &len, err, sizeof err);
  if (st == LOOM_OK) {
    lm_disk_store(disk_key, obj, len);
    st = lm_llvm_load_object(obj, len, symbol, fn, err, sizeof err);
  }
  free(obj);
  lm_stat_add(LM_STAT_COMPILE_NS, lm_now_ns() - start);
  if (st != LOOM_OK) return lm_fail(st, "compiling kernel %s: %s", symbol, err);
  lm_stat_add(LM_STAT_KERNELS_COMPILED, 1);
  return LOOM_OK;
}

loom_status lm_kernel_object(const lk_kernel *k, char symbol[36], void **obj, size_t *len) {
  lk_hash h = lk_kernel_hash(k);
  lm_llvm_symbol_name(k, symbol);
  if ((*obj = lm_disk_load(lm_disk_key(h.lo, h.hi), len))) return LOOM_OK;
  char err[1024];
  loom_status st = lm_llvm_emit_object(k, symbol, obj, len, err, sizeof err);
  if (st != LOOM_OK) return lm_fail(st, "compiling kernel %s: %s", symbol, err);
  return LOOM_OK;
}

loom_status lm_kernel_function(const lk_kernel *k, lk_fn *fn) {
  lk_hash h = lk_kernel_hash(k);
  lm_hash128 key = {h.lo, h.hi};
  lk_fn found = (lk_fn)lm_cache_get(&kernels, key, NULL);
  if (found) {
    lm_stat_add(LM_STAT_KERNEL_CACHE_HITS, 1);
    *fn = found;
    return LOOM_OK;
  }
  char symbol[36];
  lm_llvm_symbol_name(k, symbol);
  lm_hash128 disk_key = lm_disk_key(h.lo, h.hi);
  if (load_from_disk(disk_key, symbol, &found)) {
    lm_stat_add(LM_STAT_DISK_CACHE_HITS, 1);
  } else {
    loom_status st = compile(k, symbol, disk_key, &found);
    if (st != LOOM_OK) return st;
  }
  lm_cache_put(&kernels, key, (void *)found, NULL);
  *fn = found;
  return LOOM_OK;
}
