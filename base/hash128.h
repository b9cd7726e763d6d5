/* A 128-bit hash (XXH3-128's two halves): the key of the graph's canonical
 * form (ir/) and of base/cache.h's maps. */
#ifndef LOOM_BASE_HASH128_H
#define LOOM_BASE_HASH128_H

#include <stdint.h>

typedef struct lm_hash128 {
  uint64_t lo, hi;
} lm_hash128;

#endif
