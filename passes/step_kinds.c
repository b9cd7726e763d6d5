/* The step kinds at the planning layer: one row each (passes.h
 * lm_step_kind_info). The runtime's rows for the same kinds (running, text,
 * exports) are in runtime/step_kinds.c. */
#include "passes/plan_internal.h"

static void kernel_reads(const lm_step *s, void (*read)(void *ctx, int pos), void *ctx) {
  for (int a = 1; a < s->kernel.nslots; a++)
    if (!s->arg_key[a]) read(ctx, s->arg_pos[a]);
}

static void gemm_reads(const lm_step *s, void (*read)(void *ctx, int pos), void *ctx) {
  read(ctx, s->gemm.a_pos);
  read(ctx, s->gemm.b_pos);
}

static void collective_reads(const lm_step *s, void (*read)(void *ctx, int pos), void *ctx) {
  for (int k = 0; k < s->coll.nin; k++) read(ctx, s->coll.in_pos[k]);
}

static void attention_reads(const lm_step *s, void (*read)(void *ctx, int pos), void *ctx) {
  for (int k = 0; k < LM_ATTENTION_OPERANDS; k++)
    if (s->attn.pos[k] >= 0) read(ctx, s->attn.pos[k]);
}

static void sort_reads(const lm_step *s, void (*read)(void *ctx, int pos), void *ctx) {
  read(ctx, s->sort.in_pos);
}

static void scan_reads(const lm_step *s, void (*read)(void *ctx, int pos), void *ctx) {
  read(ctx, s->scan.in_pos);
}

static void check_reads(const lm_step *s, void (*read)(void *ctx, int pos), void *ctx) {
  read(ctx, s->check.in_pos);
}

static bool is_matmul(lm_op op) { return op == LM_MATMUL; }

/* In lm_step_kind's order. */
const lm_step_kind_info lm_step_kinds[] = {
    {"kernel", NULL, lm_lower, LM_SOURCES_FUSED, false, kernel_reads},
    {"gemm", is_matmul, lm_plan_gemm, LM_SOURCES_IN_PLACE, false, gemm_reads},
    {"attention", lm_op_is_attention, lm_plan_attention, LM_SOURCES_IN_PLACE, false,
     attention_reads},
    {"sort", lm_op_is_sort, lm_plan_sort, LM_SOURCES_WHOLE, false, sort_reads},
    {"scan", lm_op_is_scan, lm_plan_scan, LM_SOURCES_WHOLE, false, scan_reads},
    {"check", lm_op_is_check, lm_plan_check, LM_SOURCES_WHOLE, true, check_reads},
    {"collective", lm_op_is_collective, lm_plan_collective, LM_SOURCES_WHOLE, false,
     collective_reads},
};
_Static_assert(sizeof lm_step_kinds / sizeof *lm_step_kinds == LM_STEP_KINDS,
               "every lm_step_kind has its row in lm_step_kinds, in the enum's order");

const char *lm_step_name(const lm_step *s) {
  return s->kind == LM_STEP_COLLECTIVE ? lm_op_name(s->coll.op) : lm_step_kinds[s->kind].name;
}

lm_step_kind lm_step_kind_of(lm_op op) {
  for (int k = 0; k < LM_STEP_KINDS; k++)
    if (lm_step_kinds[k].computes && lm_step_kinds[k].computes(op)) return (lm_step_kind)k;
  return LM_STEP_KERNEL;
}

typedef struct reads_pos {
  int pos;
  bool found;
} reads_pos;

static void note_pos(void *ctx, int pos) {
  reads_pos *r = ctx;
  r->found |= pos == r->pos;
}

bool lm_step_reads_pos(const lm_step *s, int pos) {
  reads_pos r = {pos, false};
  lm_step_kinds[s->kind].reads(s, note_pos, &r);
  return r.found;
}
