/* The scan step (LM_STEP_SCAN, running sums) at the runtime layer: the
 * kernel-shaped entry points of ops/scan/scan_cpu.c for a scan's two passes,
 * their work items, the numbers they read, made from a step, and the scan's
 * row of the runtime's step kinds (ops/scan/scan_step.c). */
#ifndef LOOM_OPS_SCAN_STEP_H
#define LOOM_OPS_SCAN_STEP_H

#include <stdint.h>

#include "passes/passes.h"
#include "runtime/step_kinds.h"

#define LM_SCAN_NUMBERS 5
/* The parts' totals a scan keeps between its passes, at most: scan_cpu.c
 * cuts chains into parts only where there are fewer than 64, into at most
 * ceil(64 / chains) parts each. The caller's array (on its stack). */
#define LM_SCAN_MAX_PARTIALS 128

/* args: {void *out, const void *src, const int64_t numbers[LM_SCAN_NUMBERS],
 * uint64_t partial[LM_SCAN_MAX_PARTIALS]}; [begin, end): lm_scan_items.
 * Where lm_scan_parts is more than 1, lm_scan_sums over every item (the
 * parts' totals into partial), then lm_scan_rows over every item (the sums);
 * else lm_scan_rows alone. */
void lm_scan_sums(void *const *args, int64_t begin, int64_t end);
void lm_scan_rows(void *const *args, int64_t begin, int64_t end);
int64_t lm_scan_items(const int64_t *num);
int64_t lm_scan_parts(const int64_t *num);
/* The numbers of a step: n, inner, outer, the dtype, reverse. */
void lm_scan_numbers(const lm_scan *s, int64_t num[LM_SCAN_NUMBERS]);
/* A step's work, as counted to decide whether it runs on threads. */
int64_t lm_scan_work(const lm_scan *s);

/* Its row of lm_step_kind_runtimes (runtime/step_kinds.h). */
extern const lm_step_kind_runtime lm_scan_step_runtime;

#endif
