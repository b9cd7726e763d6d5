/*
 * Merging adjacent domain dims. Lowering keeps a kernel's domain in the shape
 * of its output (or of a source), so a contiguous [64, 16, 28, 28] map runs
 * rows of 28 and a bias gradient sums 28 values per inner loop. Dims d and
 * d + 1 merge into one of extent dom[d] * dom[d+1] when every place the index
 * leaves affine arithmetic (a load's offset, a Philox counter) weighs them as
 * c[d] == dom[d+1] * c[d+1]: then with dim d read as 0 and dim d + 1 as the
 * merged index m = i_d dom[d+1] + i_{d+1}, each such offset is unchanged,
 * since the arithmetic in between is linear.
 */
#include <stdlib.h>
#include <string.h>

#include "ir/kernel.h"

/* Whether dims d and d+1 of k may merge; af has k->nbody entries. */
static bool mergeable(const lk_kernel *k, int d, const lk_affine *af, bool *dep) {
  bool outer = d + 1 < k->nouter, reduced = d >= k->nouter;
  if (!outer && !reduced) return false;
  if (k->nstats > 0 && d + 1 == k->ndim - 1) return false; /* the rows the stats run over */
  for (int i = 0; i < k->ninst; i++) {
    const lk_inst *in = &k->inst[i];
    dep[i] = in->op == LK_DIM && (in->imm_i == d || in->imm_i == d + 1);
    const int ops[3] = {in->a, in->b, in->c};
    bool uses_dep = false;
    for (int o = 0; o < 3; o++) uses_dep |= ops[o] >= 0 && dep[ops[o]];
    if (!uses_dep) continue;
    dep[i] = true;
    if (i < k->nbody && af[i].ok) continue; /* linear on the way to an offset */
    if ((in->op != LK_LOAD && in->op != LK_RAND) || in->a >= k->nbody) return false;
    const lk_affine *at = &af[in->a];
    if (!at->ok || at->c[d] != k->dom[d + 1] * at->c[d + 1]) return false;
    dep[i] = false; /* the value read is the same: it does not depend on how */
  }
  if (dep[k->value] || dep[k->result]) return false;
  for (int s = 0; s < k->nstats; s++)
    if (dep[k->stat[s].value]) return false;
  return true;
}

static void merge(lk_kernel *k, int d) {
  for (int i = 0; i < k->ninst; i++) {
    lk_inst *in = &k->inst[i];
    if (in->op != LK_DIM) continue;
    if (in->imm_i == d) {
      in->op = LK_CONST; /* the merged index stands in dim d + 1's place */
      in->imm_i = 0;
    } else if (in->imm_i > d) {
      in->imm_i--;
    }
  }
  k->dom[d] *= k->dom[d + 1];
  for (int j = d + 1; j + 1 < k->ndim; j++) k->dom[j] = k->dom[j + 1];
  k->dom[--k->ndim] = 0;
  if (d + 1 < k->nouter) k->nouter--;
}

bool lk_kernel_merge_dims(const lk_kernel *k, lk_kernel *out, lk_inst *inst) {
  *out = *k;
  memcpy(inst, k->inst, sizeof *inst * (size_t)k->ninst);
  out->inst = inst;
  if (k->ndim < 2) return true;
  lk_affine *af = malloc(sizeof *af * (size_t)(k->nbody > 0 ? k->nbody : 1));
  bool *dep = malloc(sizeof *dep * (size_t)k->ninst);
  if (!af || !dep) {
    free(af);
    free(dep);
    return false;
  }
  for (int d = out->ndim - 2; d >= 0; d--) {
    lk_affine_analyze(out, af);
    if (mergeable(out, d, af, dep)) merge(out, d);
  }
  free(af);
  free(dep);
  return true;
}
