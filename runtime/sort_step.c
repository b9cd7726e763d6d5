/* Sort steps on the CPU: the step's description as the numbers
 * runtime/sort_cpu.c reads, and the step run over loom's threads. */
#include "runtime/sort_step.h"

#include "runtime/exec.h"
#include "runtime/runtime.h"

/* runtime/sort_cpu.c names the dtypes by loom_dtype's values (it includes no
 * loom header). */
_Static_assert(LOOM_F32 == 0 && LOOM_F64 == 1 && LOOM_I32 == 2 && LOOM_I64 == 3 && LOOM_U8 == 4 &&
                   LOOM_BOOL == 5 && LOOM_BF16 == 6 && LOOM_F16 == 7 && LOOM_I8 == 8 &&
                   LOOM_I16 == 9 && LOOM_U16 == 10 && LOOM_U32 == 11 && LOOM_U64 == 12,
               "runtime/sort_cpu.c's dtype numbers");

void lm_sort_numbers(const lm_sort *s, int64_t num[LM_SORT_NUMBERS]) {
  num[0] = s->n, num[1] = s->k, num[2] = s->dtype, num[3] = s->descending, num[4] = s->rows;
}

/* About 16 operations a value (a key, its histograms, three passes of the
 * radix sort); a polynomial of the sizes, as symbolic exports need. */
int64_t lm_sort_work(const lm_sort *s) { return 16 * s->rows * s->n; }

loom_status lm_sort_check(const lm_sort *s) {
  if (s->k > s->n) /* a symbolic program's size where k is more than a row holds */
    return lm_fail(LOOM_ERR_SHAPE, "loom_program_run: the top %lld of rows of %lld values",
                   (long long)s->k, (long long)s->n);
  return LOOM_OK;
}

loom_status lm_sort_run_cpu(const lm_exec *x, const lm_step *s) {
  const lm_sort *so = &s->sort;
  loom_status st = lm_sort_check(so);
  if (st != LOOM_OK || s->outer == 0) return st;
  int64_t num[LM_SORT_NUMBERS];
  lm_sort_numbers(so, num);
  void *const args[] = {x->bufs[s->out], x->bufs[so->in_pos], num};
  lm_run_kernel_fn(lm_sort_rows, args, 0, lm_sort_items(num), lm_sort_work(so));
  lm_stat_add(LM_STAT_KERNELS_LAUNCHED, 1);
  return LOOM_OK;
}
