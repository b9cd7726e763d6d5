/*
 * Regrouping a kernel's domain dims before code generation: splitting the
 * row's dim where the index divides it, then merging adjacent dims.
 *
 * Splitting. A pooling gradient written in the input's layout reads the pooled
 * arrays at w / 2 (IDIV and IMOD of the row's dim by a constant q), which
 * vectorizes as gathers. When the last outer dim is read only directly and
 * through IDIV/IMOD by one q dividing its extent, it becomes two dims
 * [E / q, q]: IDIV is the first, IMOD the second, and a direct read
 * q * first + second. Every offset is then affine (and the code generator
 * can run the q points of a block unrolled, the loop over the blocks vectorized).
 *
 * Merging adjacent domain dims. Lowering keeps a kernel's domain in the shape
 * of its output (or of a source), so a contiguous [64, 16, 28, 28] map runs
 * rows of 28 and a bias gradient sums 28 values per inner loop. Dims d and
 * d + 1 merge into one of extent dom[d] * dom[d+1] when every place the index
 * leaves affine arithmetic (a load's offset, a Philox counter) weighs them as
 * c[d] == dom[d+1] * c[d+1]: then with dim d read as 0 and dim d + 1 as the
 * merged index m = i_d dom[d+1] + i_{d+1}, each such offset is unchanged,
 * since the arithmetic in between is linear.
 *
 * A shape-generic kernel is left as it is: the runtime regroups a kernel
 * before generalizing it (kernel.h), so that kernels over other sizes
 * regroup alike and share the generic one.
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
  int roots[LK_MAX_ROOTS];
  for (int r = 0, nroots = lk_kernel_roots(k, roots); r < nroots; r++)
    if (dep[roots[r]]) return false;
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

/* The q by which the last outer dim is divided, when it qualifies (above), else 0. */
static int64_t split_factor(const lk_kernel *k) {
  int d = k->nouter - 1;
  if (d < 0 || k->ndim >= LOOM_MAX_DIMS || k->nstats > 0) return 0;
  int64_t q = 0;
  for (int i = 0; i < k->ninst; i++) {
    const lk_inst *in = &k->inst[i];
    const int ops[3] = {in->a, in->b, in->c};
    for (int o = 0; o < 3; o++) {
      if (ops[o] < 0 || k->inst[ops[o]].op != LK_DIM || k->inst[ops[o]].imm_i != d) continue;
      if ((in->op != LK_IDIV && in->op != LK_IMOD) || o != 0) continue; /* a direct read */
      const lk_inst *by = &k->inst[in->b];
      if (by->op != LK_CONST || by->imm_i < 2 || (q && by->imm_i != q)) return 0;
      q = by->imm_i;
    }
  }
  return q && q <= 4 && k->dom[d] % q == 0 && k->dom[d] / q >= 4 ? q : 0;
}

/* Rebuilds k with its last outer dim d split by q into out/inst (room for
 * 5 k->ninst): each direct read of dim d becomes q * hi + lo. */
static void split(const lk_kernel *k, int64_t q, lk_kernel *out, lk_inst *inst, int *map) {
  int d = k->nouter - 1, n = 0;
  *out = *k;
  out->inst = inst;
  for (int i = 0; i < k->ninst; i++) {
    lk_inst in = k->inst[i];
    if (i == k->nbody) out->nbody = n;
    bool of_d = (in.op == LK_IDIV || in.op == LK_IMOD) && k->inst[in.a].op == LK_DIM &&
                k->inst[in.a].imm_i == d;
    if (of_d) { /* hi or lo itself */
      inst[n] = (lk_inst){LK_DIM, LOOM_I64, -1, -1, -1, 0, d + (in.op == LK_IMOD), 0.0};
      map[i] = n++;
      continue;
    }
    if (in.op == LK_DIM && in.imm_i == d) { /* q * hi + lo */
      inst[n] = (lk_inst){LK_DIM, LOOM_I64, -1, -1, -1, 0, d, 0.0};
      inst[n + 1] = (lk_inst){LK_CONST, LOOM_I64, -1, -1, -1, 0, q, 0.0};
      inst[n + 2] = (lk_inst){LK_MUL, LOOM_I64, n, n + 1, -1, 0, 0, 0.0};
      inst[n + 3] = (lk_inst){LK_DIM, LOOM_I64, -1, -1, -1, 0, d + 1, 0.0};
      inst[n + 4] = (lk_inst){LK_ADD, LOOM_I64, n + 2, n + 3, -1, 0, 0, 0.0};
      map[i] = n + 4;
      n += 5;
      continue;
    }
    if (in.op == LK_DIM && in.imm_i > d) in.imm_i++;
    if (in.a >= 0) in.a = map[in.a];
    if (in.b >= 0) in.b = map[in.b];
    if (in.c >= 0) in.c = map[in.c];
    inst[n] = in;
    map[i] = n++;
  }
  lk_kernel_remap_roots(k, out, map, n); /* no stats: a kernel with stats is never split */
  for (int j = k->ndim; j > d + 1; j--) out->dom[j] = k->dom[j - 1];
  out->dom[d] = k->dom[d] / q;
  out->dom[d + 1] = q;
  out->ndim++;
  out->nouter++;
}

lk_inst *lk_kernel_regroup_dims(const lk_kernel *k, lk_kernel *out) {
  size_t room = 5 * (size_t)k->ninst; /* a split turns one instruction into five */
  lk_inst *inst = malloc(sizeof *inst * room);
  int *map = malloc(sizeof *map * (size_t)k->ninst);
  lk_affine *af = malloc(sizeof *af * room);
  bool *dep = malloc(sizeof *dep * room);
  if (!inst || !map || !af || !dep) {
    free(inst);
    free(map);
    free(af);
    free(dep);
    return NULL;
  }
  /* a generic kernel was regrouped before it was generalized (its strides
   * and extents are run-time values now, which the rules cannot weigh) */
  int64_t q = lk_kernel_is_generic(k) ? 0 : split_factor(k);
  if (q) {
    split(k, q, out, inst, map);
  } else {
    *out = *k;
    memcpy(inst, k->inst, sizeof *inst * (size_t)k->ninst);
    out->inst = inst;
  }
  int split_at = q ? k->nouter - 1 : -1; /* keep the new pair apart */
  for (int d = out->ndim - 2; d >= 0 && !lk_kernel_is_generic(k); d--) {
    if (d == split_at) continue;
    lk_affine_analyze(out, af);
    if (mergeable(out, d, af, dep)) merge(out, d);
  }
  free(map);
  free(af);
  free(dep);
  return inst;
}
