/*
 * More outputs: a kernel whose value is a target that one later kernel alone
 * reads, at each point's own index over the same domain, is computed inside
 * that kernel instead, which also stores it (lk_kernel.more). One pass over
 * memory where there were two, and one launch: AdamW's step made the new
 * first and second moments in two kernels and the new parameter in a third
 * that read them back (10 arrays through memory); merged, one kernel reads
 * p, g, m and v once and writes three (7).
 *
 * Only for runs that publish the targets from their own buffers (lazy plans,
 * runtime/realize.c): a program's and an export's steps each keep one output,
 * as their memory plans and generated drivers expect.
 */
#include <stdlib.h>
#include <string.h>

#include "passes/plan_internal.h"

/* Which steps read each position: how many, and the last of them. */
typedef struct readers {
  int *count, *last;
} readers;

static void note_reader(void *ctx, int pos, int step) {
  readers *r = ctx;
  if (pos < 0 || r->last[pos] == step) return;
  r->count[pos]++;
  r->last[pos] = step;
}

/* A kernel without a reduction, stats or kept slot, as lowered (not generic),
 * that runs itself: by itself (plain: what a merge may take from or put into)
 * or after its GEMM's product, on blocks of rows (an epilogue: on the CPU it
 * may take in a reader whose inputs are made before it). */
static bool stores_points(const lm_step *s) {
  const lk_kernel *k = &s->kernel;
  return s->kind == LM_STEP_KERNEL && !s->deferred && s->donor < 0 && s->outer > 0 &&
         k->reduce == LK_RED_NONE && k->nstats == 0 && k->keep_slot == 0 &&
         !lk_kernel_is_generic(k);
}

static bool plain(const lm_step *s) { return stores_points(s) && s->gemm_partner < 0; }

static bool cpu_epilogue(const lm_step *s, bool cpu) {
  return cpu && stores_points(s) && s->gemm_partner >= 0;
}

static bool same_domain(const lk_kernel *a, const lk_kernel *b) {
  if (a->ndim != b->ndim) return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->dom[d] != b->dom[d]) return false;
  return true;
}

/* The slot of r's kernel that reads position pos, when every instruction
 * using it loads a value of dtype dt at the point's own index; else -1. */
static int own_reading_slot(const lm_step *r, int pos, loom_dtype dt) {
  const lk_kernel *k = &r->kernel;
  int slot = -1;
  for (int a = 1; a < k->nslots; a++) {
    if (r->arg_pos[a] != pos || r->arg_key[a]) continue;
    if (slot >= 0) return -1; /* (lowering binds a position once) */
    slot = a;
  }
  if (slot < 0) return -1;
  lk_affine *af = malloc(sizeof *af * (size_t)k->nbody);
  if (!af) return -1;
  lk_affine_analyze(k, af);
  for (int i = 0; i < k->ninst && slot >= 0; i++) {
    const lk_inst *in = &k->inst[i];
    if (in->slot != slot || (in->op != LK_LOAD && in->op != LK_RAND && in->op != LK_PARAM))
      continue;
    if (in->op != LK_LOAD || in->dtype != dt || !lk_affine_is_own_index(k, &af[in->a])) slot = -1;
  }
  free(af);
  return slot;
}

/* The merged kernel under construction: its instructions (identical ones
 * shared), slots and parameters. */
typedef struct merged {
  lk_inst *inst;
  int n;
  int *arg_pos;
  bool *arg_key;
  int nslots, params_slot;
  double *params;
  int nparams;
} merged;

static int add_inst(merged *m, lk_inst in) {
  for (int i = 0; i < m->n; i++)
    if (lk_inst_same(&m->inst[i], &in)) return i;
  m->inst[m->n] = in;
  return m->n++;
}

/* The merged kernel's slot binding (pos, key), added when new. */
static int slot_for(merged *m, int pos, bool key) {
  for (int a = 1; a < m->nslots; a++)
    if (m->arg_pos[a] == pos && m->arg_key[a] == key) return a;
  m->arg_pos[m->nslots] = pos;
  m->arg_key[m->nslots] = key;
  return m->nslots++;
}

/* Copies step s's kernel's instructions into m (map: s's instruction index ->
 * m's; slot_map: s's slot -> m's), its slots rebound, its parameters after
 * m's; a load of slot `replaced` (or -1) becomes instruction `with` of m. */
static void copy_kernel(merged *m, const lm_step *s, int replaced, int with, int *map,
                        int *slot_map) {
  const lk_kernel *k = &s->kernel;
  int param_base = m->nparams;
  for (int a = 1; a < k->nslots; a++) {
    if (a == replaced) {
      slot_map[a] = -1;
    } else if (s->arg_pos[a] == LM_PARAMS_SLOT) {
      if (m->params_slot < 0) m->params_slot = slot_for(m, LM_PARAMS_SLOT, false);
      slot_map[a] = m->params_slot;
      for (int i = 0; i < s->nparams; i++) m->params[m->nparams++] = s->params[i];
    } else {
      slot_map[a] = slot_for(m, s->arg_pos[a], s->arg_key[a]);
    }
  }
  for (int i = 0; i < k->ninst; i++) {
    lk_inst in = k->inst[i];
    if (in.op == LK_LOAD && in.slot == replaced) {
      map[i] = with;
      continue;
    }
    if (in.a >= 0) in.a = map[in.a];
    if (in.b >= 0) in.b = map[in.b];
    if (in.c >= 0) in.c = map[in.c];
    if (in.op == LK_LOAD || in.op == LK_RAND || in.op == LK_PARAM) in.slot = slot_map[in.slot];
    if (in.op == LK_PARAM) in.imm_i += param_base;
    map[i] = add_inst(m, in);
  }
}

/* One kernel computes steps w's and r's values (w's output read through r's
 * slot `slot`), with their more outputs, in step `host` (w or r): the other's
 * value becomes a more output. False when out of memory or past a limit
 * (nothing changed). */
static bool merge_into(lm_step *w, lm_step *r, int slot, lm_step *host) {
  const lk_kernel *kw = &w->kernel, *kr = &r->kernel;
  if (kr->nmore + 1 + kw->nmore > LK_MAX_MORE) return false;
  size_t room = (size_t)(kw->nslots + kr->nslots);
  merged m = {.inst = malloc(sizeof(lk_inst) * (size_t)(kw->ninst + kr->ninst)),
              .arg_pos = malloc(sizeof(int) * room),
              .arg_key = calloc(room, sizeof(bool)),
              .nslots = 1,
              .params_slot = -1,
              .params = malloc(sizeof(double) * (size_t)(w->nparams + r->nparams + 1))};
  int *wmap = malloc(sizeof(int) * (size_t)kw->ninst);
  int *rmap = malloc(sizeof(int) * (size_t)kr->ninst);
  int *wslots = malloc(sizeof(int) * (size_t)kw->nslots);
  int *rslots = malloc(sizeof(int) * (size_t)kr->nslots);
  bool ok = m.inst && m.arg_pos && m.arg_key && m.params && wmap && rmap && wslots && rslots;
  bool into_w = host == w;
  lk_kernel k = host->kernel;
  if (ok) {
    m.arg_pos[0] = host->out;
    copy_kernel(&m, w, -1, -1, wmap, wslots);
    int w_slot = into_w ? 0 : slot_for(&m, w->out, false);
    copy_kernel(&m, r, slot, wmap[kw->value], rmap, rslots);
    int r_slot = into_w ? slot_for(&m, r->out, false) : 0;
    k.inst = m.inst;
    k.ninst = k.nbody = m.n;
    k.value = k.result = into_w ? wmap[kw->value] : rmap[kr->value];
    k.nslots = m.nslots;
    k.nmore = 0;
    const lm_step *first = into_w ? w : r, *second = into_w ? r : w;
    const int *first_slots = into_w ? wslots : rslots, *first_map = into_w ? wmap : rmap;
    const int *second_slots = into_w ? rslots : wslots, *second_map = into_w ? rmap : wmap;
    for (int i = 0; i < first->kernel.nmore; i++)
      k.more[k.nmore++] = (struct lk_output){first_slots[first->kernel.more[i].slot],
                                             first_map[first->kernel.more[i].value]};
    k.more[k.nmore++] =
        (struct lk_output){into_w ? r_slot : w_slot, second_map[second->kernel.value]};
    for (int i = 0; i < second->kernel.nmore; i++)
      k.more[k.nmore++] = (struct lk_output){second_slots[second->kernel.more[i].slot],
                                             second_map[second->kernel.more[i].value]};
    /* (a slot both read and written, say r loading one of w's more outputs, fails the check) */
    ok = m.nslots <= LM_KERNEL_MAX_SLOTS && lk_kernel_check(&k) == NULL;
    /* a GEMM epilogue keeps the slot its product is read through */
    if (into_w && w->gemm_partner >= 0) ok = ok && wslots[w->gemm_slot] == w->gemm_slot;
  }
  if (ok) {
    free(host->kernel.inst);
    free(host->arg_pos);
    free(host->arg_key);
    free(host->params);
    host->kernel = k;
    host->arg_pos = m.arg_pos;
    host->arg_key = m.arg_key;
    host->params = m.params;
    host->nparams = m.nparams;
  } else {
    free(m.inst);
    free(m.arg_pos);
    free(m.arg_key);
    free(m.params);
  }
  free(wmap);
  free(rmap);
  free(wslots);
  free(rslots);
  return ok;
}

/* Drops the removed steps, renumbering the step indices steps hold. */
static void compact(lm_plan *p, const bool *removed, int *new_index) {
  int n = 0;
  for (int i = 0; i < p->nsteps; i++) new_index[i] = removed[i] ? -1 : n++;
  for (int i = 0, at = 0; i < p->nsteps; i++) {
    if (removed[i]) continue;
    lm_step *s = &p->steps[i];
    if (s->gemm_partner >= 0) s->gemm_partner = new_index[s->gemm_partner];
    if (s->b_producer >= 0) s->b_producer = new_index[s->b_producer];
    p->steps[at++] = *s;
  }
  p->nsteps = n;
}

/* Every step's frees again: a merged step reads what its producer read,
 * later. Without the memory for that, nothing is freed before the run ends. */
static void replan_frees(lm_plan *p) {
  for (int i = 0; i < p->nsteps; i++) {
    free(p->steps[i].free_after);
    p->steps[i].free_after = NULL;
    p->steps[i].nfree = 0;
  }
  if (lm_plan_frees(p)) return;
  for (int i = 0; i < p->nsteps; i++) {
    free(p->steps[i].free_after);
    p->steps[i].free_after = NULL;
    p->steps[i].nfree = 0;
  }
}

/* Whether every position step r reads but `except` is a leaf or made by a step
 * before step `at` (producer: per position, the step storing it, or -1). */
static bool inputs_made_before(const lm_step *r, int except, const int *producer, int at) {
  for (int a = 1; a < r->kernel.nslots; a++) {
    int pos = r->arg_pos[a];
    if (pos >= 0 && !r->arg_key[a] && pos != except && producer[pos] >= at) return false;
  }
  return true;
}

/* The positions step s stores are now made by step `by`. */
static void note_made(const lm_step *s, int by, int *producer) {
  producer[s->out] = by;
  for (int m = 0; s->kind == LM_STEP_KERNEL && m < s->kernel.nmore; m++)
    producer[s->arg_pos[s->kernel.more[m].slot]] = by;
}

static void drop(lm_step *s) {
  free(s->kernel.inst);
  free(s->arg_pos);
  free(s->arg_key);
  free(s->params);
  free(s->free_after);
  s->free_after = NULL, s->nfree = 0;
}

void lm_plan_more_outputs(lm_plan *p, bool cpu) {
  int npos = p->nnodes + p->ntemps, n = p->nsteps;
  readers r = {calloc((size_t)npos + 1, sizeof(int)), malloc(sizeof(int) * ((size_t)npos + 1))};
  int *producer = malloc(sizeof(int) * ((size_t)npos + 1));
  bool *removed = calloc((size_t)n + 1, sizeof(bool));
  int *new_index = malloc(sizeof(int) * ((size_t)n + 1));
  bool any = false;
  if (r.count && r.last && producer && removed && new_index) {
    for (int pos = 0; pos < npos; pos++) r.last[pos] = producer[pos] = -1;
    for (int i = 0; i < n; i++) lm_step_reads(p, i, note_reader, &r);
    for (int i = 0; i < n; i++) note_made(&p->steps[i], i, producer);
    /* in order: a merged step may be merged on into its own output's reader */
    for (int i = 0; i < n; i++) {
      lm_step *w = &p->steps[i];
      bool host = cpu_epilogue(w, cpu);
      if (removed[i] || !(plain(w) || host) || w->out >= p->nnodes || !p->published[w->out] ||
          r.count[w->out] != 1)
        continue;
      int j = r.last[w->out];
      lm_step *reader = &p->steps[j];
      if (j <= i || removed[j] || !plain(reader) || !same_domain(&w->kernel, &reader->kernel))
        continue;
      int slot = own_reading_slot(reader, w->out, w->dtype);
      if (slot < 0) continue;
      if (!host && merge_into(w, reader, slot, reader)) { /* w's value made where it is read */
        note_made(w, j, producer);
        drop(w);
        removed[i] = any = true;
      } else if (host && reader->out < p->nnodes && p->published[reader->out] &&
                 inputs_made_before(reader, w->out, producer, i) &&
                 merge_into(w, reader, slot, w)) { /* the reader's value made with w's */
        note_made(reader, i, producer);
        drop(reader);
        removed[j] = any = true;
      }
    }
  }
  if (any) {
    compact(p, removed, new_index);
    replan_frees(p);
    lm_plan_collective_waits(p);
  }
  free(r.count);
  free(r.last);
  free(producer);
  free(removed);
  free(new_index);
}
