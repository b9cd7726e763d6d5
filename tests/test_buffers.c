/* The CPU buffer pool (runtime/buffer.c): freed blocks are cached by size
 * class and handed out again, up to 2 GiB or the most the pool ever handed
 * out at once, if more, so a working set past 2 GiB (GPT-2 124M's training
 * step, 2.9 GB) is recycled whole instead of touching fresh pages every step.
 * The blocks here are never written, so the system backs none of their pages. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "ir/ir.h"
#include "runtime/runtime.h"

#define GIB ((size_t)1 << 30)

static void test_working_set_past_the_floor(void) {
  lm_buffer_trim();
  void *first[3], *again[3];
  for (int i = 0; i < 3; i++) CHECK((first[i] = lm_buffer_alloc(GIB)) != NULL);
  for (int i = 0; i < 3; i++) lm_buffer_free(first[i], GIB);
  CHECK_EQ_INT((long long)(lm_buffer_cached_bytes() / GIB), 3); /* all kept, past 2 GiB */
  for (int i = 0; i < 3; i++) CHECK((again[i] = lm_buffer_alloc(GIB)) != NULL);
  CHECK_EQ_INT((long long)lm_buffer_cached_bytes(), 0);
  int reused = 0; /* the same blocks, in any order */
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) reused += again[i] == first[j];
  CHECK_EQ_INT(reused, 3);
  for (int i = 0; i < 3; i++) lm_buffer_free(again[i], GIB);
  lm_buffer_trim();
  CHECK_EQ_INT((long long)lm_buffer_cached_bytes(), 0);
}

/* Below the high-water mark nothing changes: blocks of a class come back. */
static void test_small_blocks_reused(void) {
  void *a = lm_buffer_alloc(1000), *b = lm_buffer_alloc(3 << 20);
  CHECK(a && b);
  lm_buffer_free(a, 1000);
  lm_buffer_free(b, 3 << 20);
  CHECK(lm_buffer_alloc(1000) == a);
  CHECK(lm_buffer_alloc(3 << 20) == b);
  CHECK((uintptr_t)b % (2 << 20) == 0); /* 2 MiB or more: huge-page aligned */
  lm_buffer_free(a, 1000);
  lm_buffer_free(b, 3 << 20);
  lm_buffer_trim();
}

int main(void) {
  test_working_set_past_the_floor();
  test_small_blocks_reused();
  return check_report();
}
