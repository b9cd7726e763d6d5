/*
 * Absorbed exps: an F32 exp whose value is only ever added to (or subtracted
 * from, or has subtracted from it) a constant of magnitude at least 1, as in
 * sigmoid's 1 + e^-x or softplus's log(1 + e^x). Below e^-86.5 such a value
 * vanishes in the sum exactly as the true value would, so the exp needs no
 * gradual underflow and scales by 2^k in one step (lm_vm_exp_f32_absorbed):
 * 8 vector operations fewer per element.
 */
#include <math.h>
#include <stdlib.h>

#include "backends/llvm/llvm_internal.h"

static bool big_const(const lk_kernel *k, int i) {
  return i >= 0 && k->inst[i].op == LK_CONST && fabs(k->inst[i].imm_f) >= 1.0;
}

bool lm_absorbed_analyze(lm_cg *g) {
  const lk_kernel *k = g->k;
  g->absorbed = calloc((size_t)k->ninst, sizeof *g->absorbed);
  if (!g->absorbed) return false;
  for (int i = 0; i < k->ninst; i++)
    g->absorbed[i] = k->inst[i].op == LK_EXP && k->inst[i].dtype == LOOM_F32;
  for (int j = 0; j < k->ninst; j++) {
    const lk_inst *in = &k->inst[j];
    bool sum = in->op == LK_ADD || in->op == LK_SUB;
    if (in->a >= 0 && !(sum && big_const(k, in->b))) g->absorbed[in->a] = false;
    if (in->b >= 0 && !(sum && big_const(k, in->a))) g->absorbed[in->b] = false;
    if (in->c >= 0) g->absorbed[in->c] = false;
  }
  /* read from outside the instruction list: the value itself */
  int roots[LK_MAX_ROOTS];
  for (int r = 0, nroots = lk_kernel_roots(k, roots); r < nroots; r++)
    g->absorbed[roots[r]] = false;
  return true;
}
