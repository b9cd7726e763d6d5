/* Memory planning: every buffer the program allocates for a non-target is
 * freed right after the last step that reads it, so later steps reuse its
 * memory (the allocator hands freed blocks out again by size class). */
#include <stdlib.h>

#include "passes/plan_internal.h"

/* ------------------------------------------------------------ memory */

typedef struct step_read {
  void (*read)(void *ctx, int pos, int step);
  void *ctx;
  int step;
} step_read;

static void read_at_step(void *ctx, int pos) {
  step_read *r = ctx;
  r->read(r->ctx, pos, r->step);
}

void lm_step_reads(const lm_plan *p, int i, void (*read)(void *ctx, int pos, int step), void *ctx) {
  const lm_step *s = &p->steps[i];
  step_read r = {read, ctx, i};
  lm_step_kinds[s->kind]->reads(s, read_at_step, &r);
  if (s->kind == LM_STEP_KERNEL && s->gemm_partner >= 0) /* its GEMM runs here */
    lm_step_kinds[LM_STEP_GEMM]->reads(&p->steps[s->gemm_partner], read_at_step, &r);
  if (s->kind == LM_STEP_GEMM && s->b_producer >= 0) /* so does B's kernel */
    lm_step_kinds[LM_STEP_KERNEL]->reads(&p->steps[s->b_producer], read_at_step, &r);
}

static void note_read(void *last, int pos, int step) {
  if (pos >= 0) ((int *)last)[pos] = step;
}

/* Liveness: every buffer the program allocates for a non-target is freed
 * right after the last step reading it, so later steps reuse its memory
 * (the allocator hands freed blocks out again by size class). */
bool lm_plan_frees(lm_plan *p) {
  int npos = p->nnodes + p->ntemps;
  int *last = malloc(sizeof(int) * (size_t)(npos > 0 ? npos : 1));
  if (!last) return false;
  for (int i = 0; i < npos; i++) last[i] = -1;
  for (int i = 0; i < p->nsteps; i++) {
    note_read(last, p->steps[i].out, i); /* a buffer nobody reads is freed after its step */
    lm_step_reads(p, i, note_read, last);
  }
  bool ok = true;
  for (int i = 0; i < p->nsteps && ok; i++) {
    lm_step *s = &p->steps[i];
    int out = s->out;
    bool owned = out >= p->nnodes || !p->published[out];
    if (!owned || last[out] < 0) continue;
    lm_step *at = &p->steps[last[out]];
    int *grown = realloc(at->free_after, sizeof(int) * (size_t)(at->nfree + 1));
    if (!grown)
      ok = false;
    else
      at->free_after = grown, at->free_after[at->nfree++] = out;
  }
  free(last);
  return ok;
}
