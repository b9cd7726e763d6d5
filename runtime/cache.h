/* An in-memory map from 128-bit hashes to values, bounded with LRU eviction,
 * guarded by its own mutex. Used for the graph -> program and kernel caches. */
#ifndef LOOM_RUNTIME_CACHE_H
#define LOOM_RUNTIME_CACHE_H

#include <pthread.h>

#include "ir/ir.h"

typedef struct lm_cache_entry lm_cache_entry;

typedef struct lm_cache {
  pthread_mutex_t lock;
  lm_cache_entry **buckets;
  size_t nbuckets;
  size_t count, capacity;              /* capacity 0: unbounded */
  lm_cache_entry *lru_head, *lru_tail; /* head: most recently used */
  void (*free_value)(void *value);
} lm_cache;

#define LM_CACHE_INIT(cap, free_fn)                                                                \
  { PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, (cap), NULL, NULL, (free_fn) }

/* The value for key (marked most recently used), or NULL. When `acquire` is
 * given it runs on the value under the cache's lock (to take a reference
 * before an eviction could free it). */
void *lm_cache_get(lm_cache *c, lm_hash128 key, void (*acquire)(void *value));
/* Inserts (or keeps the existing value, returning it); evicts beyond capacity.
 * Returns the value now stored for key, or NULL when out of memory;
 * *inserted (may be NULL) says whether it is `value`, put there now. */
void *lm_cache_put(lm_cache *c, lm_hash128 key, void *value, void (*acquire)(void *value),
                   bool *inserted);
/* Drops every entry (free_value runs on each). */
void lm_cache_clear(lm_cache *c);

#endif
