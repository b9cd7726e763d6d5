/* An in-memory map from 128-bit hashes to values, bounded with LRU eviction,
 * guarded by its own mutex. Used for the graph -> program and code caches.
 * Each value weighs 1 unless the cache has a `weigh` function; the capacity
 * bounds the total weight. */
#ifndef LOOM_BASE_CACHE_H
#define LOOM_BASE_CACHE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/hash128.h"

typedef struct lm_cache_entry lm_cache_entry;

typedef struct lm_cache {
  pthread_mutex_t lock;
  lm_cache_entry **buckets;
  size_t nbuckets;
  size_t count, weight, capacity;      /* capacity 0: unbounded */
  lm_cache_entry *lru_head, *lru_tail; /* head: most recently used */
  void (*free_value)(void *value);
  size_t (*weigh)(const void *value); /* NULL: every value weighs 1 */
} lm_cache;

#define LM_CACHE_INIT(cap, free_fn) LM_CACHE_INIT_WEIGHED(cap, free_fn, NULL)
#define LM_CACHE_INIT_WEIGHED(cap, free_fn, weigh_fn)                                              \
  { PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, 0, (cap), NULL, NULL, (free_fn), (weigh_fn) }

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
/* Sets the capacity (0: unbounded), evicting down to it. */
void lm_cache_set_capacity(lm_cache *c, size_t capacity);
/* Entries held now. */
size_t lm_cache_count(lm_cache *c);

#endif
