/* Hash map + LRU list; see cache.h. */
#include <stdlib.h>

#include "base/cache.h"

struct lm_cache_entry {
  lm_hash128 key;
  void *value;
  size_t weight;
  lm_cache_entry *next_in_bucket;
  lm_cache_entry *prev, *next; /* LRU list */
};

static size_t bucket_of(const lm_cache *c, lm_hash128 key) {
  return (size_t)(key.lo ^ (key.hi >> 7)) & (c->nbuckets - 1);
}

static void lru_unlink(lm_cache *c, lm_cache_entry *e) {
  if (e->prev)
    e->prev->next = e->next;
  else
    c->lru_head = e->next;
  if (e->next)
    e->next->prev = e->prev;
  else
    c->lru_tail = e->prev;
  e->prev = e->next = NULL;
}

static void lru_push_front(lm_cache *c, lm_cache_entry *e) {
  e->prev = NULL;
  e->next = c->lru_head;
  if (c->lru_head) c->lru_head->prev = e;
  c->lru_head = e;
  if (!c->lru_tail) c->lru_tail = e;
}

static lm_cache_entry *find(lm_cache *c, lm_hash128 key) {
  if (!c->nbuckets) return NULL;
  for (lm_cache_entry *e = c->buckets[bucket_of(c, key)]; e; e = e->next_in_bucket)
    if (e->key.lo == key.lo && e->key.hi == key.hi) return e;
  return NULL;
}

static bool grow(lm_cache *c) {
  size_t nb = c->nbuckets ? c->nbuckets * 2 : 256;
  lm_cache_entry **buckets = calloc(nb, sizeof *buckets);
  if (!buckets) return false;
  size_t old = c->nbuckets;
  lm_cache_entry **oldb = c->buckets;
  c->buckets = buckets;
  c->nbuckets = nb;
  for (size_t i = 0; i < old; i++) {
    lm_cache_entry *e = oldb[i];
    while (e) {
      lm_cache_entry *next = e->next_in_bucket;
      size_t b = bucket_of(c, e->key);
      e->next_in_bucket = buckets[b];
      buckets[b] = e;
      e = next;
    }
  }
  free(oldb);
  return true;
}

static void remove_entry(lm_cache *c, lm_cache_entry *e) {
  lm_cache_entry **p = &c->buckets[bucket_of(c, e->key)];
  while (*p != e) p = &(*p)->next_in_bucket;
  *p = e->next_in_bucket;
  lru_unlink(c, e);
  c->count--;
  c->weight -= e->weight;
  if (c->free_value) c->free_value(e->value);
  free(e);
}

/* Least recently used entries out until the weight fits, never `keep`. */
static void evict(lm_cache *c, const lm_cache_entry *keep) {
  while (c->capacity && c->weight > c->capacity && c->lru_tail && c->lru_tail != keep)
    remove_entry(c, c->lru_tail);
}

void *lm_cache_get(lm_cache *c, lm_hash128 key, void (*acquire)(void *value)) {
  pthread_mutex_lock(&c->lock);
  lm_cache_entry *e = find(c, key);
  void *v = NULL;
  if (e) {
    lru_unlink(c, e);
    lru_push_front(c, e);
    v = e->value;
    if (acquire) acquire(v);
  }
  pthread_mutex_unlock(&c->lock);
  return v;
}

void *lm_cache_put(lm_cache *c, lm_hash128 key, void *value, void (*acquire)(void *value),
                   bool *inserted) {
  pthread_mutex_lock(&c->lock);
  lm_cache_entry *e = find(c, key);
  void *stored = NULL;
  if (inserted) *inserted = false;
  if (e) {
    stored = e->value; /* another thread got there first: keep one */
  } else if ((c->count + 1 <= c->nbuckets || grow(c)) && (e = calloc(1, sizeof *e))) {
    e->key = key;
    e->value = value;
    size_t b = bucket_of(c, key);
    e->next_in_bucket = c->buckets[b];
    c->buckets[b] = e;
    lru_push_front(c, e);
    e->weight = c->weigh ? c->weigh(value) : 1;
    c->count++;
    c->weight += e->weight;
    stored = value;
    if (inserted) *inserted = true;
    evict(c, e);
  }
  if (stored && acquire) acquire(stored);
  pthread_mutex_unlock(&c->lock);
  return stored;
}

void lm_cache_clear(lm_cache *c) {
  pthread_mutex_lock(&c->lock);
  while (c->lru_tail) remove_entry(c, c->lru_tail);
  free(c->buckets);
  c->buckets = NULL;
  c->nbuckets = 0;
  pthread_mutex_unlock(&c->lock);
}

void lm_cache_set_capacity(lm_cache *c, size_t capacity) {
  pthread_mutex_lock(&c->lock);
  c->capacity = capacity;
  evict(c, NULL);
  pthread_mutex_unlock(&c->lock);
}

size_t lm_cache_count(lm_cache *c) {
  pthread_mutex_lock(&c->lock);
  size_t n = c->count;
  pthread_mutex_unlock(&c->lock);
  return n;
}
