/* Scan steps at the runtime layer: the step's description as the numbers
 * ops/scan/scan_cpu.c reads, its passes run over loom's threads, its line in
 * a program's listing and in LOOM_PROFILE's report, its fields for plan
 * templates, and its code in exported libraries. */
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

static void write_text(lm_step_text *t, const loom_program *p, int i) {
  const lm_step *s = &p->plan->steps[i];
  const lm_scan *sc = &s->scan;
  char o[24], x[24];
  lm_step_text_put(
      t, "  step %d: scan -> %s %s[%lld,%lld,%lld], running sums along the middle dim%s from %s\n",
      i, lm_step_text_pos(p, s->out, o), loom_dtype_name(sc->dtype), (long long)sc->outer,
      (long long)sc->n, (long long)sc->inner, sc->reverse ? " from its end" : "",
      lm_step_text_pos(p, sc->in_pos, x));
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

/* ops/scan/scan_cpu.c's two passes over its items (the first only where it
 * cuts the chains into parts), its numbers written out (so a symbolic export
 * fits them as any other) and the parts' totals on the stack. */
static void write_export(const lm_export_layout *l, int i, FILE *f) {
  const lm_step *s = &l->p->plan->steps[i];
  if (s->outer == 0) return;
  char o[96], x[96];
  int64_t num[LM_SCAN_NUMBERS];
  lm_scan_numbers(&s->scan, num);
  fprintf(f, "  { /* step %d: scan, running sums of %s%s */\n", i, loom_dtype_name(s->scan.dtype),
          s->scan.reverse ? ", from the end" : "");
  lm_export_write_numbers(f, num, LM_SCAN_NUMBERS);
  fprintf(f, "    uint64_t partial[%d];\n", LM_SCAN_MAX_PARTIALS);
  fprintf(f, "    void *const args[] = {%s, %s, (void *)num, partial};\n",
          lm_export_buffer(l, s->out, o, sizeof o),
          lm_export_buffer(l, s->scan.in_pos, x, sizeof x));
  fprintf(f, "    if (%s_scan_parts(num) > 1)\n", l->name);
  fprintf(f, "      run_kernel(%s_scan_sums, args, %s_scan_items(num), %" PRId64 ");\n", l->name,
          l->name, lm_scan_work(&s->scan));
  fprintf(f, "    run_kernel(%s_scan_rows, args, %s_scan_items(num), %" PRId64 ");\n  }\n", l->name,
          l->name, lm_scan_work(&s->scan));
}

static const char *const export_fns[] = {"lm_scan_sums", "lm_scan_rows", "lm_scan_items",
                                         "lm_scan_parts"};
static const lm_export_kernel export_kernel = {
    "scan", "ops/scan/scan_cpu.c", lm_scan_cpu_source, export_fns, 4, false};

const lm_step_kind_runtime lm_scan_step_runtime = {
    .run_cpu = run_cpu,
    .write_text = write_text,
    .write_profile = write_profile,
    .walk = walk,
    .write_export = write_export,
    .export_kernel = &export_kernel,
};
