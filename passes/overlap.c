/* Collectives that run while the program computes: each is scheduled as
 * soon as its sources are made (a data-parallel bucket's all-reduce right
 * after the backward pass made its gradients), the steps reading its result
 * as late as they can go (the optimizer's updates after the rest of the
 * backward pass), and it is waited for only by the first of them, so the
 * steps between overlap it. */
#include <stdlib.h>
#include <string.h>

#include "passes/plan_internal.h"

/* The steps each step reads from: deps[start[j] .. start[j + 1]). */
typedef struct graph_of_steps {
  int *producer; /* per position: the step writing it, or -1 (a leaf) */
  int *start, *deps;
  int ndeps, cap;
  bool oom;
} graph_of_steps;

static void note_dep(void *ctx, int pos, int step) {
  (void)step;
  graph_of_steps *g = ctx;
  int from = pos >= 0 ? g->producer[pos] : -1;
  if (from < 0 || g->oom) return;
  if (g->ndeps == g->cap) {
    int cap = g->cap ? 2 * g->cap : 64;
    int *grown = realloc(g->deps, sizeof(int) * (size_t)cap);
    if (!grown) {
      g->oom = true;
      return;
    }
    g->deps = grown, g->cap = cap;
  }
  g->deps[g->ndeps++] = from;
}

static bool ready(const graph_of_steps *g, const bool *placed, int j) {
  for (int k = g->start[j]; k < g->start[j + 1]; k++)
    if (!placed[g->deps[k]]) return false;
  return true;
}

/* Whether step j reads the result of a collective already placed and not yet
 * waited for. */
static bool reads_running(const lm_plan *p, const graph_of_steps *g, const bool *placed,
                          const bool *waited, int j) {
  for (int k = g->start[j]; k < g->start[j + 1]; k++) {
    int from = g->deps[k];
    if (p->steps[from].kind == LM_STEP_COLLECTIVE && placed[from] && !waited[from]) return true;
  }
  return false;
}

/* A list schedule: the planned order, except that a ready collective goes
 * first (as soon as its sources are made) and the steps reading a running
 * one's result only when no other step is ready. */
static bool reorder(lm_plan *p, graph_of_steps *g) {
  int n = p->nsteps, npos = p->nnodes + p->ntemps;
  g->producer = malloc(sizeof(int) * (size_t)(npos > 0 ? npos : 1));
  g->start = malloc(sizeof(int) * (size_t)(n + 1));
  bool *placed = calloc((size_t)n + 1, sizeof(bool)), *waited = calloc((size_t)n + 1, 1);
  int *order = malloc(sizeof(int) * (size_t)(n + 1));
  lm_step *steps = malloc(sizeof(lm_step) * (size_t)(n + 1));
  bool ok = g->producer && g->start && placed && waited && order && steps;
  for (int i = 0; ok && i < npos; i++) g->producer[i] = -1;
  for (int j = 0; ok && j < n; j++) g->producer[p->steps[j].out] = j;
  for (int j = 0; ok && j < n; j++) {
    g->start[j] = g->ndeps;
    lm_step_reads(p, j, note_dep, g);
    ok = !g->oom;
  }
  if (ok) g->start[n] = g->ndeps;
  int first = 0; /* every step before it is placed */
  for (int count = 0; ok && count < n; count++) {
    int pick = -1, other = -1, reader = -1;
    for (int j = first; j < n && pick < 0; j++) {
      if (placed[j] || !ready(g, placed, j)) continue;
      if (p->steps[j].kind == LM_STEP_COLLECTIVE)
        pick = j;
      else if (other < 0 && !reads_running(p, g, placed, waited, j))
        other = j;
      else if (reader < 0)
        reader = j;
    }
    if (pick < 0) pick = other >= 0 ? other : reader;
    for (int k = g->start[pick]; k < g->start[pick + 1]; k++) waited[g->deps[k]] = true;
    placed[pick] = true;
    order[count] = pick;
    while (first < n && placed[first]) first++;
  }
  for (int i = 0; ok && i < n; i++) steps[i] = p->steps[order[i]];
  if (ok) memcpy(p->steps, steps, sizeof(lm_step) * (size_t)n);
  free(placed), free(waited), free(order), free(steps);
  return ok;
}

bool lm_plan_overlap_collectives(lm_plan *p) {
  bool any = false;
  for (int i = 0; i < p->nsteps && !any; i++) any = p->steps[i].kind == LM_STEP_COLLECTIVE;
  if (!any) return true;
  graph_of_steps g = {0};
  bool ok = reorder(p, &g);
  free(g.producer), free(g.start), free(g.deps);
  return ok;
}

typedef struct first_read {
  int pos, step;
} first_read;

static void note_first(void *ctx, int pos, int step) {
  first_read *f = ctx;
  if (pos == f->pos && f->step < 0) f->step = step;
}

void lm_plan_collective_waits(lm_plan *p) {
  int of = 0, number = 0;
  for (int i = 0; i < p->nsteps; i++) of += p->steps[i].kind == LM_STEP_COLLECTIVE;
  for (int i = 0; i < p->nsteps; i++) {
    lm_step *s = &p->steps[i];
    if (s->kind != LM_STEP_COLLECTIVE) continue;
    s->coll.number = ++number, s->coll.of = of;
    first_read f = {s->out, -1};
    for (int j = i + 1; j < p->nsteps && f.step < 0; j++) lm_step_reads(p, j, note_first, &f);
    s->coll.wait_before = f.step < 0 ? p->nsteps : f.step;
  }
}

bool lm_collective_runs_on(const lm_plan *p, int i) {
  const lm_step *s = &p->steps[i];
  return s->kind == LM_STEP_COLLECTIVE && s->coll.op == LM_ALL_REDUCE &&
         s->coll.wait_before > i + 1;
}
