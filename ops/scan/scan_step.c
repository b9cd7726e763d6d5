/* Scan steps at the runtime layer: the step's description as the numbers
 * ops/scan/scan_cpu.c reads, its passes run over loom's threads, its line in
 * LOOM_PROFILE's report and its fields for plan templates (its listing line
 * and its code in exported libraries: scan_io.c). */
#include "ops/scan/scan_step.h"

#include <inttypes.h>

#include "runtime/exec.h"
#include "runtime/runtime.h"

/* ops/scan/scan_cpu.c names the dtypes by loom_dtype's values (it includes no
 * loom header). */
_Static_assert(LOOM_F32 == 0 && LOOM_F64 == 1 && LOOM_I64 == 3, "ops/scan/scan_cpu.c's dtypes");

void lm_scan_numbers(const lm_scan *s, int64_t num[LM_SCAN_NUMBERS]) {
  num[0] = s->n, num[1] = s->inner, num[2] = s->outer, num[3] = s->dtype, num[4] = s->reverse;
}

/* About 2 operations a value (a load and an addition, a store); a
 * polynomial of the sizes, as symbolic exports need. */
int64_t lm_scan_work(const lm_scan *s) { return 2 * s->outer * s->n * s->inner; }

static loom_status run_cpu(const lm_exec *x, const lm_step *s) {
  if (s->outer == 0) return LOOM_OK;
  const lm_scan *sc = &s->scan;
  int64_t num[LM_SCAN_NUMBERS];
  uint64_t partial[LM_SCAN_MAX_PARTIALS];
  lm_scan_numbers(sc, num);
  void *const args[] = {x->bufs[s->out], x->bufs[sc->in_pos], num, partial};
  int64_t items = lm_scan_items(num), work = lm_scan_work(sc);
  if (lm_scan_parts(num) > 1) lm_run_kernel_fn(lm_scan_sums, args, 0, items, work);
  lm_run_kernel_fn(lm_scan_rows, args, 0, items, work);
  lm_stat_add(LM_STAT_KERNELS_LAUNCHED, 1);
  return LOOM_OK;
}

static void write_profile(FILE *f, const lm_step *s) {
  fprintf(f, "scan: sums of %lld chains of %lld %s%s\n", (long long)(s->scan.outer * s->scan.inner),
          (long long)s->scan.n, loom_dtype_name(s->scan.dtype),
          s->scan.reverse ? ", from the end" : "");
}

static void walk(lm_plan_walk *w, lm_step *step, int i) {
  (void)i;
  lm_scan *s = &step->scan;
  LM_WALK_SHAPE(w, s->dtype);
  LM_WALK_SHAPE(w, s->in_pos);
  LM_WALK_SHAPE(w, s->reverse);
  lm_plan_walk_number(w, &s->outer);
  lm_plan_walk_number(w, &s->n);
  lm_plan_walk_number(w, &s->inner);
}

const lm_step_kind_runtime lm_scan_step_runtime = {
    .run_cpu = run_cpu,
    .write_profile = write_profile,
    .walk = walk,
};
