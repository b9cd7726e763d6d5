/* Memory planning: every buffer the program allocates for a non-target is
 * freed right after the last step that reads it, so later steps reuse its
 * memory (the allocator hands freed blocks out again by size class). */
#include <stdlib.h>

#include "passes/plan_internal.h"

/* ------------------------------------------------------------ memory */

static void note_read(int *last, int pos, int step) {
  if (pos >= 0) last[pos] = step;
}

/* Liveness: every buffer the program allocates for a non-target is freed
 * right after the last step reading it, so later steps reuse its memory
 * (the allocator hands freed blocks out again by size class). */
bool lm_plan_frees(lm_schedule *p) {
  int npos = p->nnodes + p->ntemps;
  int *last = malloc(sizeof(int) * (size_t)(npos > 0 ? npos : 1));
  if (!last) return false;
  for (int i = 0; i < npos; i++) last[i] = -1;
  for (int i = 0; i < p->nsteps; i++) {
    lm_step *s = &p->steps[i];
    note_read(last, s->out, i); /* a buffer nobody reads is freed after its step */
    if (s->kind == LM_STEP_GEMM) {
      note_read(last, s->gemm.a_pos, i);
      note_read(last, s->gemm.b_pos, i);
    }
    for (int k = 0; s->kind == LM_STEP_COLLECTIVE && k < s->coll.nin; k++)
      note_read(last, s->coll.in_pos[k], i);
    for (int a = 1; s->kind == LM_STEP_KERNEL && a < s->kernel.nslots; a++)
      if (!s->arg_key[a]) note_read(last, s->arg_pos[a], i);
    if (s->kind == LM_STEP_KERNEL && s->gemm_partner >= 0) { /* its GEMM runs here */
      note_read(last, p->steps[s->gemm_partner].gemm.a_pos, i);
      note_read(last, p->steps[s->gemm_partner].gemm.b_pos, i);
    }
    if (s->kind == LM_STEP_GEMM && s->b_producer >= 0) { /* so does B's kernel */
      const lm_step *e = &p->steps[s->b_producer];
      for (int a = 1; a < e->kernel.nslots; a++)
        if (!e->arg_key[a]) note_read(last, e->arg_pos[a], i);
    }
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
