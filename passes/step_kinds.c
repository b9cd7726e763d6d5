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

static void check_reads(const lm_step *s, void (*read)(void *ctx, int pos), void *ctx) {
  read(ctx, s->check.in_pos);
}

static bool is_matmul(lm_op op) { return op == LM_MATMUL; }

static const lm_step_kind_info kernel_kind = {
    .name = "kernel",
    .computes = NULL, /* every op lowered */
    .plan = lm_lower,
    .sources = LM_SOURCES_FUSED,
    .reads = kernel_reads,
};
static const lm_step_kind_info gemm_kind = {
    .name = "gemm",
    .computes = is_matmul,
    .plan = lm_plan_gemm,
    .sources = LM_SOURCES_IN_PLACE,
    .reads = gemm_reads,
};
static const lm_step_kind_info attention_kind = {
    .name = "attention",
    .computes = lm_op_is_attention,
    .plan = lm_plan_attention,
    .sources = LM_SOURCES_IN_PLACE,
    .reads = attention_reads,
};
static const lm_step_kind_info sort_kind = {
    .name = "sort",
    .computes = lm_op_is_sort,
    .plan = lm_plan_sort,
    .sources = LM_SOURCES_WHOLE,
    .reads = sort_reads,
};
static const lm_step_kind_info check_kind = {
    .name = "check",
    .computes = lm_op_is_check,
    .plan = lm_plan_check,
    .sources = LM_SOURCES_WHOLE,
    .first_source_only = true,
    .reads = check_reads,
};
static const lm_step_kind_info collective_kind = {
    .name = "collective",
    .computes = lm_op_is_collective,
    .plan = lm_plan_collective,
    .sources = LM_SOURCES_WHOLE,
    .reads = collective_reads,
};

/* In lm_step_kind's order; a library op's row is in its folder
 * (ops/<op>/<op>_plan.c). */
const lm_step_kind_info *const lm_step_kinds[] = {
    &kernel_kind,       &gemm_kind,  &attention_kind,  &sort_kind,
    &lm_scan_step_kind, &check_kind, &collective_kind,
};
_Static_assert(sizeof lm_step_kinds / sizeof *lm_step_kinds == LM_STEP_KINDS,
               "every lm_step_kind has its row in lm_step_kinds, in the enum's order");

const char *lm_step_name(const lm_step *s) {
  return s->kind == LM_STEP_COLLECTIVE ? lm_op_name(s->coll.op) : lm_step_kinds[s->kind]->name;
}

lm_step_kind lm_step_kind_of(lm_op op) {
  for (int k = 0; k < LM_STEP_KINDS; k++)
    if (lm_step_kinds[k]->computes && lm_step_kinds[k]->computes(op)) return (lm_step_kind)k;
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
  lm_step_kinds[s->kind]->reads(s, note_pos, &r);
  return r.found;
}
