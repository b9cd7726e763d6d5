/* Scan steps at the io layer: the step's line in a program's listing and its
 * code in exported libraries, which compile ops/scan/scan_cpu.c in. */
#include "ops/scan/scan_io.h"

#include <inttypes.h>

#include "ops/scan/scan_step.h"

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
static const lm_export_kernel export_kernel = {"ops/scan/scan_cpu.c", lm_scan_cpu_source,
                                               LM_EXPORT_FNS(export_fns), false};

const lm_step_kind_io lm_scan_step_io = {
    .write_text = write_text,
    .write_export = write_export,
    .export_kernel = &export_kernel,
};
