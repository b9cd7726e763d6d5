/*
 * Updates in place: a kernel whose value is `where(c, x, L)` over a realized
 * tensor L, read at each point's own index, changes L only where c holds (a
 * KV cache writing one position: loom_assign(cache, where(here, new, cache))).
 * When nothing else reads L, the kernel may write into L's buffer and store
 * only the points taking x: a one-row write instead of a copy of the whole
 * cache. Planning marks such steps (donor, kernel.keep_slot); the runtime
 * decides per run whether L's buffer is free to take (runtime/realize.c: no
 * other reference to L) and otherwise gives the step a copy of L first.
 */
#include <stdlib.h>

#include "passes/plan_internal.h"

static void count_read(void *ctx, int pos, int step) {
  (void)step;
  if (pos >= 0) ((int *)ctx)[pos]++;
}

/* The slot of step s's kernel that its value's WHERE keeps (an arm that is
 * the slot's only load, at the output's own row-major index), or 0. */
static int kept_slot(const lm_step *s) {
  const lk_kernel *k = &s->kernel;
  if (k->reduce != LK_RED_NONE || k->nstats > 0 || lk_kernel_is_generic(k)) return 0;
  const lk_inst *w = &k->inst[k->value];
  if (w->op != LK_WHERE) return 0;
  lk_affine *af = malloc(sizeof *af * (size_t)k->nbody);
  if (!af) return 0;
  lk_affine_analyze(k, af);
  int found = 0;
  for (int arm = 0; arm < 2 && !found; arm++) {
    const lk_inst *load = &k->inst[arm == 0 ? w->b : w->c];
    if (load->op != LK_LOAD || load->slot < 1 || s->arg_key[load->slot] ||
        s->arg_pos[load->slot] < 0 || load->a < 0 || load->a >= k->nbody)
      continue;
    int loads = 0;
    for (int i = 0; i < k->ninst; i++)
      loads += k->inst[i].op == LK_LOAD && k->inst[i].slot == load->slot;
    if (lk_affine_is_own_index(k, &af[load->a]) && loads == 1) found = load->slot;
  }
  free(af);
  return found;
}

void lm_plan_in_place(const lm_graph *g, lm_plan *p) {
  int *readers = calloc((size_t)(p->nnodes + p->ntemps) + 1, sizeof *readers);
  if (!readers) return; /* only a copy more */
  for (int i = 0; i < p->nsteps; i++) lm_step_reads(p, i, count_read, readers);
  for (int i = 0; i < p->nsteps; i++) {
    lm_step *s = &p->steps[i];
    s->donor = -1;
    if (s->kind != LM_STEP_KERNEL || s->out >= p->nnodes || !p->published[s->out] || s->deferred ||
        s->gemm_partner >= 0)
      continue;
    bool makes_b = false;
    for (int j = 0; j < p->nsteps; j++) makes_b |= p->steps[j].b_producer == i;
    int slot = makes_b ? 0 : kept_slot(s);
    if (slot == 0) continue;
    int pos = s->arg_pos[slot];
    if (pos >= p->nnodes) continue; /* a temporary */
    const lm_node *leaf = g->nodes[pos];
    if (leaf->op != LM_BUFFER || !leaf->data || readers[pos] != 1 || leaf->dtype != s->dtype ||
        lm_shape_numel(&leaf->shape) != s->outer)
      continue;
    s->donor = pos;
    s->kernel.keep_slot = slot;
  }
  free(readers);
}
