/*
 * Guarded loads. Lowering reads a padded view (im2col, a convolution's input
 * gradient, pad) as
 *
 *   %i = i64 where %inside, %e, 0      ; clamped, so the load stays in bounds
 *   %v = f32 load slot [.. %i ..]
 *   %r = f32 where %inside, %v, 0
 *
 * Emitted as written, the select in the address makes LLVM gather. But the
 * load's value only reaches anything through such `where(c, ., z)` wrappers,
 * so it is needed only where every c holds, and there each clamp whose
 * condition is one of those c (or part of one, through `and`) is its
 * unclamped %e. The load is emitted under a branch on the conditions, at that
 * unclamped index (computed before the branch), and the wrappers pass its
 * value on: a phi of the load and z.
 * The loop vectorizer turns the branch into a masked contiguous load.
 *
 * Only 4- and 8-byte loads are guarded: x86 has masked loads for those (AVX),
 * while a masked byte load needs AVX-512BW and without it the loop would not
 * vectorize at all.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/llvm/llvm_internal.h"

static bool same_const(const lk_inst *a, const lk_inst *b) {
  if (a->dtype != b->dtype) return false;
  if (lm_dtype_is_float(a->dtype))
    return memcmp(&a->imm_f, &b->imm_f, sizeof a->imm_f) == 0; /* -0 and NaN by bits */
  return a->imm_i == b->imm_i;
}

/* Follows load i's chain of single-use `where(c, ., z)` wrappers, recording
 * it in g->guard[i] and g->pass_to; leaves it unguarded when there is none. */
static void follow_chain(lm_cg *g, int i, const int *uses, const int *user) {
  const lk_kernel *k = g->k;
  lm_guard *gd = &g->guard[i];
  int cur = i;
  while (uses[cur] == 1 && user[cur] >= 0 && gd->ncond < LM_GUARD_MAX_CONDS) {
    const lk_inst *w = &k->inst[user[cur]];
    if (w->op != LK_WHERE || w->b != cur || w->a == cur || w->c == cur || w->a > i ||
        k->inst[w->c].op != LK_CONST)
      break;
    if (gd->ncond > 0 && !same_const(&k->inst[w->c], &k->inst[gd->fill])) break;
    gd->fill = w->c;
    gd->cond[gd->ncond++] = w->a;
    cur = user[cur];
  }
  for (int j = i, n = 0; n < gd->ncond; n++) { /* the wrappers take the load's value */
    j = user[j];
    g->pass_to[j] = i;
  }
}

bool lm_guards_analyze(lm_cg *g) {
  const lk_kernel *k = g->k;
  int n = k->ninst;
  int *uses = calloc((size_t)n, sizeof *uses), *user = malloc((size_t)n * sizeof *user);
  g->guard = calloc((size_t)n, sizeof *g->guard);
  g->pass_to = malloc((size_t)n * sizeof *g->pass_to);
  if (!uses || !user || !g->guard || !g->pass_to) {
    free(uses);
    free(user);
    return false;
  }
  for (int i = 0; i < n; i++) user[i] = g->pass_to[i] = -1;
  for (int i = 0; i < n; i++) {
    const int ops[3] = {k->inst[i].a, k->inst[i].b, k->inst[i].c};
    for (int o = 0; o < 3; o++)
      if (ops[o] >= 0) uses[ops[o]]++, user[ops[o]] = i;
  }
  /* uses from outside the instruction list: they see the value unwrapped */
  int roots[LK_MAX_ROOTS];
  for (int r = 0, nroots = lk_kernel_roots(k, roots); r < nroots; r++)
    uses[roots[r]]++, user[roots[r]] = -1;
  for (int i = 0; i < n; i++) {
    loom_dtype dt = k->inst[i].dtype;
    if (k->inst[i].op == LK_LOAD && loom_dtype_size(dt) > 1) /* not BOOL, U8, I8 */
      follow_chain(g, i, uses, user);
  }
  free(uses);
  free(user);
  return true;
}

void lm_guards_free(lm_cg *g) {
  free(g->guard);
  free(g->pass_to);
  g->guard = NULL;
  g->pass_to = NULL;
}

/* Whether bool instruction c holds wherever all of gd's conditions do. */
static bool implied(const lk_kernel *k, const lm_guard *gd, int c) {
  for (int j = 0; j < gd->ncond; j++) {
    int stack[32], top = 0;
    stack[top++] = gd->cond[j];
    while (top > 0) {
      int x = stack[--top];
      if (x == c) return true;
      if (k->inst[x].op == LK_AND && top + 2 <= 32)
        stack[top++] = k->inst[x].a, stack[top++] = k->inst[x].b;
    }
  }
  return false;
}

/* The load's index with every clamp implied by the guard replaced by its
 * unclamped value: the changed instructions are emitted again here (in the
 * guarded block), and g->val is left as it was. */
static LLVMValueRef unclamped_index(lm_cg *g, const lm_guard *gd, int index) {
  const lk_kernel *k = g->k;
  unsigned char *in_dag = calloc((size_t)index + 1, 1);
  LLVMValueRef *saved = malloc(((size_t)index + 1) * sizeof *saved);
  if (!in_dag || !saved) {
    free(in_dag);
    free(saved);
    return lm_cg_fail(g, "out of memory in codegen");
  }
  in_dag[index] = 1;
  for (int j = index; j >= 0; j--) {
    if (!in_dag[j]) continue;
    const lk_inst *in = &k->inst[j];
    if (in->a >= 0) in_dag[in->a] = 1;
    if (in->b >= 0) in_dag[in->b] = 1;
    if (in->c >= 0) in_dag[in->c] = 1;
  }
  /* In order: a clamp the guard implies, or an instruction reading one that
   * changed, changes (in_dag becomes 2) and gets its new value here. */
  memcpy(saved, g->val, ((size_t)index + 1) * sizeof *saved);
  for (int j = 0; j <= index && !g->failed; j++) {
    if (!in_dag[j]) continue;
    const lk_inst *in = &k->inst[j];
    bool clamp = in->op == LK_WHERE && implied(k, gd, in->a);
    bool changed = clamp || (in->a >= 0 && in_dag[in->a] == 2) ||
                   (in->b >= 0 && in_dag[in->b] == 2) || (in->c >= 0 && in_dag[in->c] == 2);
    if (!changed) continue;
    in_dag[j] = 2;
    g->val[j] = clamp ? g->val[in->b] : lm_emit_inst(g, j);
  }
  LLVMValueRef r = g->failed ? NULL : g->val[index];
  for (int j = 0; j <= index; j++) g->val[j] = saved[j];
  free(in_dag);
  free(saved);
  return r;
}

LLVMValueRef lm_emit_guarded_load(lm_cg *g, int i) {
  const lk_inst *in = &g->k->inst[i];
  const lm_guard *gd = &g->guard[i];
  LLVMValueRef when = NULL;
  for (int j = 0; j < gd->ncond; j++) {
    LLVMValueRef c = g->val[gd->cond[j]];
    if (!c) return lm_cg_fail(g, "guarded load %d: condition %%%d has no value", i, gd->cond[j]);
    when = when ? LLVMBuildAnd(g->b, when, c, "") : c;
  }
  LLVMValueRef fill = lm_emit_inst(g, gd->fill);
  if (!fill) return NULL;
  /* The index before the branch: it cannot trap (divisors are positive), and
   * a division by a run-time size (a generic kernel's) inside the guarded
   * block is one LLVM 14's vectorizer predicates on the first lane only,
   * leaving the other lanes' address poison when that lane is masked off. */
  LLVMValueRef index = unclamped_index(g, gd, in->a);
  if (!index) return NULL;
  LLVMBasicBlockRef from = LLVMGetInsertBlock(g->b);
  LLVMBasicBlockRef load = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "guard.load");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "guard.done");
  LLVMBuildCondBr(g->b, when, load, done);
  LLVMPositionBuilderAtEnd(g->b, load);
  LLVMValueRef v = lm_emit_load(g, in->dtype, in->slot, index);
  LLVMBasicBlockRef loaded = LLVMGetInsertBlock(g->b);
  LLVMBuildBr(g->b, done);
  LLVMPositionBuilderAtEnd(g->b, done);
  LLVMValueRef phi = LLVMBuildPhi(g->b, lm_type(g, in->dtype), "");
  LLVMValueRef values[2] = {v, fill};
  LLVMBasicBlockRef blocks[2] = {loaded, from};
  LLVMAddIncoming(phi, values, blocks, 2);
  return phi;
}
