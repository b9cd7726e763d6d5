/* The sort step (LM_STEP_SORT) on the CPU: the kernel-shaped entry point of
 * runtime/sort_cpu.c, its work items, and the numbers it reads, made from a
 * step (runtime/sort_step.c). */
#ifndef LOOM_RUNTIME_SORT_STEP_H
#define LOOM_RUNTIME_SORT_STEP_H

#include <stdint.h>

#include "passes/passes.h"

#define LM_SORT_NUMBERS 5

/* args: {int64_t *out, const void *src, const int64_t numbers[LM_SORT_NUMBERS]};
 * [begin, end): rows (lm_sort_items). */
void lm_sort_rows(void *const *args, int64_t begin, int64_t end);
int64_t lm_sort_items(const int64_t *num);
/* The numbers of a step: n, k, the dtype, descending, rows. */
void lm_sort_numbers(const lm_sort *s, int64_t num[LM_SORT_NUMBERS]);
/* LOOM_OK, or the error for a step keeping more than a row holds (a symbolic
 * program run at a size its k does not fit). */
loom_status lm_sort_check(const lm_sort *s);
/* A step's work, as counted to decide whether it runs on threads. */
int64_t lm_sort_work(const lm_sort *s);

/* runtime/sort_cpu.c's text (generated at build time), for exports */
extern const char lm_sort_cpu_source[];

#endif
