/* Checks of data-dependent input (LM_CHECK, runtime/check_cpu.c): a check
 * step's numbers, the check of values on the host, and the step run on the
 * CPU. The frontend checks realized data at the call with the same function,
 * so that a call and a run refuse a value with the same message. */
#ifndef LOOM_RUNTIME_CHECK_STEP_H
#define LOOM_RUNTIME_CHECK_STEP_H

#include <stddef.h>
#include <stdint.h>

#include "passes/passes.h"

#define LM_CHECK_NUMBERS 8

/* runtime/check_cpu.c: 0 when src's values keep the rule num describes
 * (lm_check_numbers); else 1, with "<op>: <the first value breaking it>" in
 * msg (always terminated). */
int lm_check_values(const void *src, const int64_t *num, const char *op, char *msg, size_t len);
/* The numbers of a check: rows, cols, the dtype, the rule, lo, hi, whether a
 * value is ignored, which. */
void lm_check_numbers(const lm_check_step *c, int64_t num[LM_CHECK_NUMBERS]);
/* LOOM_OK, or LOOM_ERR_VALUE recorded with the check's message, for values
 * (c's source, on the host). */
loom_status lm_check_host(const lm_check_step *c, const void *values);

/* For LM_CHECK node n whose source holds its data (on any device): LOOM_OK,
 * or LOOM_ERR_VALUE recorded with the check's message; what a run would say,
 * said at the call. */
loom_status lm_check_now(const lm_node *n);

/* runtime/check_cpu.c's text (generated at build time), for exports */
extern const char lm_check_cpu_source[];

#endif
