/* The scan step's planning: the SCAN node -> its step, whose source is
 * stored whole (fusion.c marks it) and read as [outer, n, inner] around the
 * scanned dim. */
#include "ops/scan/scan_plan.h"

#include "passes/plan_internal.h"

static loom_status plan_scan(const lm_planner *pl, lm_node *n, lm_step *step, char *err,
                             size_t errlen) {
  (void)err, (void)errlen;
  const lm_node *x = n->src[0];
  int axis = n->arg.scan.axis;
  lm_scan sc = {.dtype = x->dtype,
                .in_pos = lm_graph_pos(pl->g, x),
                .outer = 1,
                .n = x->shape.dim[axis],
                .inner = 1,
                .reverse = n->arg.scan.reverse};
  for (int d = 0; d < x->shape.ndim; d++)
    if (d < axis)
      sc.outer *= x->shape.dim[d];
    else if (d > axis)
      sc.inner *= x->shape.dim[d];
  step->scan = sc;
  lm_library_step(step, LM_STEP_SCAN, n);
  return LOOM_OK;
}

static void scan_reads(const lm_step *s, void (*read)(void *ctx, int pos), void *ctx) {
  read(ctx, s->scan.in_pos);
}

const lm_step_kind_info lm_scan_step_kind = {
    .name = "scan",
    .computes = lm_op_is_scan,
    .plan = plan_scan,
    .sources = LM_SOURCES_WHOLE,
    .reads = scan_reads,
};
