/* The scan step (LM_STEP_SCAN, running sums) at the planning layer: its
 * payload in lm_step and its row of passes.h's step kinds (ops/scan/scan_plan.c). */
#ifndef LOOM_OPS_SCAN_PLAN_H
#define LOOM_OPS_SCAN_PLAN_H

#include "ir/ir.h"

/* A scan (LM_SCAN): out, of the source's shape and dtype, holds the running
 * sums of its source, stored whole, along the middle dim of [outer, n, inner]
 * (row-major; inner 1 where the scanned dim is the last). */
typedef struct lm_scan {
  loom_dtype dtype; /* the source's and the output's: F32, F64, I64 */
  int in_pos;       /* canonical position of the source's buffer */
  int64_t outer, n, inner;
  bool reverse; /* from the dim's end */
} lm_scan;

/* Its row of lm_step_kinds (passes/passes.h). */
extern const struct lm_step_kind_info lm_scan_step_kind;

#endif
