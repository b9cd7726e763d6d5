/* Buffers behind computed tensors.
 *
 * Fresh memory is expensive here (first touch of 4 KiB pages runs at about
 * 0.3 GB/s), so freed buffers are kept in size classes and handed out again:
 * a training step or a benchmark loop reuses the same memory every time.
 * Buffers of 2 MiB or more are 2 MiB aligned and asked to use transparent
 * huge pages. Classes round up by at most 25%; the cache holds at most
 * CACHE_LIMIT bytes or the most the pool ever had handed out at once, if
 * more (a training step's working set, recycled whole: GPT-2 124M's 2.9 GB
 * step once re-touched ~0.7 GB of fresh pages over 20 steps with 2 GiB);
 * beyond that, freed buffers go back to the system.
 *
 * bytes_live counts the bytes tensors asked for and hold now, exactly. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "runtime/runtime.h"

#define SMALL_STEP 64
#define SMALL_LIMIT 4096
#define HUGE_PAGE ((size_t)2 << 20)
#define NUM_CLASSES LM_SIZE_CLASSES
#define CACHE_LIMIT ((size_t)2 << 30)

typedef struct free_block {
  struct free_block *next;
} free_block;

/* The allocator's free lists: global state the design names (a cache),
 * guarded by `lock`. */
static struct {
  pthread_mutex_t lock;
  free_block *lists[NUM_CLASSES];
  size_t cached_bytes;
  size_t out_bytes, out_high; /* handed out now (rounded), and the most ever */
} pool = {PTHREAD_MUTEX_INITIALIZER, {0}, 0, 0, 0};

/* Size class of a request: its index and the rounded size it allocates
 * (shared with the CUDA device allocator). */
int lm_size_class(size_t bytes, size_t *rounded) {
  if (bytes <= SMALL_LIMIT) {
    size_t r = bytes ? (bytes + SMALL_STEP - 1) / SMALL_STEP * SMALL_STEP : SMALL_STEP;
    *rounded = r;
    return (int)(r / SMALL_STEP) - 1;
  }
  int e = 63 - __builtin_clzll((unsigned long long)(bytes - 1)); /* 2^e < bytes <= 2^(e+1) */
  size_t step = (size_t)1 << (e - 2);                            /* quarters of 2^e */
  size_t r = (bytes + step - 1) / step * step;
  *rounded = r;
  int quarter = (int)(r / step) - 4; /* 1..4 */
  return SMALL_LIMIT / SMALL_STEP + (e - 12) * 4 + quarter - 1;
}

/* LOOM_POISON=1 (tests): freed and fresh blocks are filled with 0xA5, so a
 * buffer read after its memory was reused, or two live buffers sharing
 * memory, show up as wrong values. Read once. */
static pthread_once_t poison_once = PTHREAD_ONCE_INIT;
static bool poison;
static void read_poison(void) { poison = lm_env_flag("LOOM_POISON"); }

static void *system_alloc(size_t rounded) {
  size_t align = rounded >= HUGE_PAGE ? HUGE_PAGE : 64;
  void *p = NULL; /* posix_memalign: aligned_alloc wants the size a multiple of the alignment */
  if (posix_memalign(&p, align, rounded) != 0) return NULL;
  if (align == HUGE_PAGE) madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

/* Under pool.lock. */
static void hand_out(size_t rounded) {
  pool.out_bytes += rounded;
  if (pool.out_bytes > pool.out_high) pool.out_high = pool.out_bytes;
}

void *lm_buffer_alloc(size_t bytes) {
  size_t rounded;
  if (bytes > ((size_t)1 << 56)) return NULL;
  int c = lm_size_class(bytes, &rounded);
  void *p = NULL;
  pthread_mutex_lock(&pool.lock);
  if (c < NUM_CLASSES && pool.lists[c]) {
    free_block *b = pool.lists[c];
    pool.lists[c] = b->next;
    pool.cached_bytes -= rounded;
    p = b;
    hand_out(rounded);
  }
  pthread_mutex_unlock(&pool.lock);
  if (!p) {
    if (!(p = system_alloc(rounded))) return NULL;
    pthread_mutex_lock(&pool.lock);
    hand_out(rounded);
    pthread_mutex_unlock(&pool.lock);
  }
  pthread_once(&poison_once, read_poison);
  if (poison) memset(p, 0xA5, rounded);
  lm_stat_bytes((int64_t)bytes);
  return p;
}

void lm_buffer_free(void *data, size_t bytes) {
  if (!data) return;
  lm_stat_bytes(-(int64_t)bytes);
  size_t rounded;
  int c = lm_size_class(bytes, &rounded);
  pthread_once(&poison_once, read_poison);
  if (poison) memset(data, 0xA5, rounded);
  pthread_mutex_lock(&pool.lock);
  pool.out_bytes -= rounded;
  size_t limit = pool.out_high > CACHE_LIMIT ? pool.out_high : CACHE_LIMIT;
  bool keep = c < NUM_CLASSES && pool.cached_bytes + rounded <= limit;
  if (keep) {
    free_block *b = data;
    b->next = pool.lists[c];
    pool.lists[c] = b;
    pool.cached_bytes += rounded;
  }
  pthread_mutex_unlock(&pool.lock);
  if (!keep) free(data);
}

size_t lm_buffer_cached_bytes(void) {
  pthread_mutex_lock(&pool.lock);
  size_t bytes = pool.cached_bytes;
  pthread_mutex_unlock(&pool.lock);
  return bytes;
}

void lm_buffer_trim(void) {
  pthread_mutex_lock(&pool.lock);
  for (int c = 0; c < NUM_CLASSES; c++)
    while (pool.lists[c]) {
      free_block *b = pool.lists[c];
      pool.lists[c] = b->next;
      free(b);
    }
  pool.cached_bytes = 0;
  pthread_mutex_unlock(&pool.lock);
}
