/* Plan templates: one plan for every size of a symbolic program's symbols.
 *
 * Planning a symbolic program at a new size (instantiating its graph, fusing,
 * lowering, planning memory, finding the kernels) costs about a millisecond
 * for an MLP, and more for a transformer. A template is made once: the
 * program planned at a grid of sizes (3 values of each symbol from its traced
 * size) and at two check points further out. Those plans must agree in all
 * but numbers: the same steps, the same kernels once each is generalized over
 * all of its sizes (lm_kernel_generic_all), the same slots, frees, GEMM
 * layouts and collectives. Each number (a step's element count, a kernel's
 * sizes, a GEMM's batch, M, N, K, strides and offsets, a collective's counts)
 * is fitted over the grid as a polynomial of the symbols (lm_sym_fit) and
 * must give the check points' numbers. Where anything else differs, or a
 * number is no such polynomial, the program has no template and plans each
 * size as before.
 *
 * A template serves a *box*: every symbol between the smallest and largest
 * value it was planned and checked at. A size in the box is an instance: the
 * template's steps with the polynomials evaluated (its kernels' sizes, its
 * GEMMs' functions looked up for their sizes), no planning. Its kernels read
 * at run time only the sizes that vary over the box; the rest (a softmax's
 * row length when only the batch varies) stay constants. Plan decisions
 * are thresholds that grow with the sizes (a split reduction from 65536
 * inputs, row blocks, a GEMM's epilogue blocking), so a plan that is the same
 * at the box's two corners is the same inside it; a decision on divisibility
 * shows between the grid's consecutive sizes. A size outside the box is
 * planned at the corners of the box grown to hold it, twice as far as it
 * needs (so a growing sequence plans O(log n) times), and the box grows when
 * both corners agree with the template; otherwise the size is planned alone.
 * LOOM_VERIFY_PLANS=1 also plans every instance's size and compares.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"
#include "runtime/compile.h"
#include "runtime/cuda.h"
#include "runtime/exec.h"
#include "runtime/gemm.h"
#include "runtime/program.h"
#include "runtime/runtime.h"
#include "runtime/step_kinds.h"

#define OP "loom_program_run"
#define CHECKS 2

/* A field added to a step must be described by walk_plan (as shape or as a
 * number) or an instance runs with the template's value of it. */
#if UINTPTR_MAX == UINT64_MAX
_Static_assert(sizeof(lm_step) == 712 && sizeof(lm_gemm) == 432 && sizeof(lm_collective) == 88 &&
                   sizeof(lm_attention) == 640 && sizeof(lm_sort) == 40 && sizeof(lm_scan) == 40 &&
                   sizeof(lm_check_step) == 104 && sizeof(lk_kernel) == 304,
               "lm_step changed: describe the new field in walk_plan, then update the sizes here");
#endif

struct lm_plan_template {
  int k; /* symbols */
  loom_device device;
  lm_plan *plan; /* the traced sizes' plan, its kernels compiled over the sizes that vary */
  int nsteps;
  int *nall;            /* [nsteps] a kernel step's sizes (lm_kernel_generic_all's) */
  unsigned char **vary; /* [nsteps] which of them vary (the compiled kernel reads those) */
  unsigned char *shape; /* the plans' description but for the numbers */
  size_t nshape;
  lm_sym_expr *num; /* [nnum] each number, as the walk meets them */
  int nnum;
  pthread_mutex_t lock; /* the box */
  int64_t lo[LM_SYM_MAX_SYMBOLS], hi[LM_SYM_MAX_SYMBOLS];
};

/* ------------------------------------------------------------ the walk */

/* A plan, described: its shape (every field a run reads, as bytes) and its
 * numbers, in walk order. */
typedef struct desc {
  unsigned char *shape;
  size_t nshape, shape_cap;
  int64_t *num;
  int nnum, num_cap;
  int *kfirst, *kcount; /* [nsteps] where a kernel step's sizes are among num */
  bool oom, unfit;      /* out of memory; a plan no template holds */
} desc;

/* Either describes a plan (d set) or writes numbers into an instance's
 * steps (vals set, taken in order from `at`). */
typedef struct lm_plan_walk {
  desc *d;
  const int64_t *vals;
  int at, nvals;
  const lm_plan_template *t; /* instantiating: which sizes its kernels read */
  bool oom;
} walk;

static void put(desc *d, const void *v, size_t n) {
  if (n == 0) return; /* an empty array may be NULL */
  if (d->nshape + n > d->shape_cap) {
    size_t cap = d->shape_cap ? 2 * d->shape_cap : 4096;
    while (cap < d->nshape + n) cap *= 2;
    unsigned char *grown = realloc(d->shape, cap);
    if (!grown) {
      d->oom = true;
      return;
    }
    d->shape = grown, d->shape_cap = cap;
  }
  memcpy(d->shape + d->nshape, v, n);
  d->nshape += n;
}
#define PUT(d, field) put((d), &(field), sizeof(field))
#define PUT_ARRAY(d, ptr, count) put((d), (ptr), sizeof *(ptr) * (size_t)(count))

static void number(walk *w, int64_t *field) {
  if (!w->d) {
    if (w->at < w->nvals) *field = w->vals[w->at++];
    return;
  }
  desc *d = w->d;
  if (d->nnum == d->num_cap) {
    int cap = d->num_cap ? 2 * d->num_cap : 256;
    int64_t *grown = realloc(d->num, sizeof *grown * (size_t)cap);
    if (!grown) {
      d->oom = true;
      return;
    }
    d->num = grown, d->num_cap = cap;
  }
  d->num[d->nnum++] = *field;
}

void lm_plan_walk_shape(lm_plan_walk *w, const void *field, size_t bytes) {
  if (w->d) put(w->d, field, bytes);
}

void lm_plan_walk_number(lm_plan_walk *w, int64_t *field) { number(w, field); }

/* A kernel step: described by its generalized kernel (whose hash leaves out
 * every size but -1, 0 and 1) and the sizes it runs with; in an instance, the
 * sizes are written and the extents (the first ndim sizes) set in its dom,
 * which the executor reads. */
void lm_kernel_walk(lm_plan_walk *w, lm_step *s, int i) {
  if (w->d) {
    PUT(w->d, s->kernel.keep_slot);
    PUT(w->d, s->kernel.nmore);
    PUT_ARRAY(w->d, s->kernel.more, s->kernel.nmore);
    for (int d = 0; d < s->kernel.ndim; d++)
      if (s->kernel.dom[d] == 0) w->d->unfit = true; /* empty kernels specialize */
    if (w->d->unfit) return;
    lk_kernel g;
    int64_t *sizes;
    if (lm_kernel_generic_all(OP, &s->kernel, &g, &sizes) != LOOM_OK) {
      w->d->oom = true;
      return;
    }
    lk_hash h = lk_kernel_hash(&g);
    PUT(w->d, h);
    PUT(w->d, g.nsizes);
    w->d->kfirst[i] = w->d->nnum, w->d->kcount[i] = g.nsizes;
    for (int j = 0; j < g.nsizes; j++) number(w, &sizes[j]);
    free(g.inst);
    free(sizes);
    PUT(w->d, s->kernel.nslots);
    PUT_ARRAY(w->d, s->arg_pos, s->kernel.nslots);
    PUT_ARRAY(w->d, s->arg_key, s->kernel.nslots);
    PUT(w->d, s->nparams);
    PUT_ARRAY(w->d, s->params, s->nparams);
    return;
  }
  /* an instance: every size, the extents (the first ndim) into dom, the
   * ones that vary into the sizes its kernel reads */
  int n = w->t->nall[i];
  int64_t small[64], *all = n <= 64 ? small : malloc(sizeof *all * (size_t)n);
  if (!all || (s->nsizes > 0 && !(s->sizes = malloc(sizeof *s->sizes * (size_t)s->nsizes)))) {
    if (all != small) free(all);
    w->oom = true;
    return;
  }
  for (int j = 0; j < n; j++) number(w, &all[j]);
  for (int d = 0; d < s->kernel.ndim && d < n; d++) s->kernel.dom[d] = all[d];
  for (int j = 0, at = 0; j < n && s->sizes; j++)
    if (w->t->vary[i][j]) s->sizes[at++] = all[j];
  if (all != small) free(all);
}

void lm_gemm_walk(lm_plan_walk *w, lm_step *s, int i) {
  (void)i;
  lm_gemm *g = &s->gemm;
  if (w->d) {
    PUT(w->d, g->dtype);
    PUT(w->d, g->in_dtype);
    PUT(w->d, g->nbatch);
    PUT(w->d, g->a_trans);
    PUT(w->d, g->b_trans);
    PUT(w->d, g->a_pos);
    PUT(w->d, g->b_pos);
  }
  for (int i = 0; i < g->nbatch; i++) {
    number(w, &g->batch[i]);
    number(w, &g->a_bstride[i]);
    number(w, &g->b_bstride[i]);
  }
  int64_t *nums[] = {&g->a_offset, &g->b_offset, &g->M, &g->N, &g->K, &g->lda, &g->ldb};
  for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) number(w, nums[i]);
  lm_gemm_windows *v = &g->win;
  if (w->d) {
    PUT(w->d, v->on);
    PUT(w->d, v->x_pos);
  }
  int64_t *geometry[] = {&v->n,           &v->c,           &v->h,      &v->w,         &v->oh,
                         &v->ow,          &v->kh,          &v->kw,     &v->stride[0], &v->stride[1],
                         &v->dilation[0], &v->dilation[1], &v->pad[0], &v->pad[1]};
  for (size_t i = 0; v->on && i < sizeof geometry / sizeof *geometry; i++) number(w, geometry[i]);
}

void lm_collective_walk(lm_plan_walk *w, lm_step *s, int i) {
  (void)i;
  lm_collective *c = &s->coll;
  if (w->d) {
    PUT(w->d, c->op);
    PUT(w->d, c->reduce);
    PUT(w->d, c->root);
    PUT(w->d, c->world);
    PUT(w->d, c->nin);
    PUT_ARRAY(w->d, c->in_pos, c->nin);
    PUT(w->d, c->dtype);
    PUT(w->d, c->number);
    PUT(w->d, c->of);
    PUT(w->d, c->wait_before);
  }
  for (int i = 0; i < c->nin; i++) number(w, &c->in_count[i]);
  number(w, &c->count);
  number(w, &c->outer);
  number(w, &c->inner);
}

void lm_attention_walk(lm_plan_walk *w, lm_step *step, int i) {
  (void)i;
  lm_attention *a = &step->attn;
  if (w->d) {
    PUT(w->d, a->nbatch);
    PUT_ARRAY(w->d, a->pos, LM_ATTENTION_OPERANDS);
    PUT(w->d, a->scale);
    PUT(w->d, a->causal);
    PUT(w->d, a->mask);
    PUT(w->d, a->backward);
  }
  for (int i = 0; i < a->nbatch; i++) number(w, &a->batch[i]);
  int64_t *nums[] = {&a->tq, &a->tk, &a->d, &a->dv};
  for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) number(w, nums[i]);
  number(w, &a->mask_stride);
  for (int s = 0; s < LM_ATTENTION_OPERANDS; s++) {
    if (a->pos[s] < 0) continue;
    number(w, &a->offset[s]);
    number(w, &a->row_stride[s]);
    for (int i = 0; i < a->nbatch; i++) number(w, &a->bstride[s][i]);
  }
}

void lm_check_walk(lm_plan_walk *w, lm_step *s, int i) {
  (void)i;
  lm_check_step *c = &s->check;
  if (w->d) {
    PUT(w->d, c->dtype);
    PUT(w->d, c->in_pos);
    PUT(w->d, c->rule);
    PUT(w->d, c->has_ignore);
    PUT(w->d, c->ignore);
    PUT(w->d, c->op);
  }
  number(w, &c->lo);
  number(w, &c->hi); /* a table's rows, a cache's length less the update's: they may follow */
  number(w, &c->rows);
  number(w, &c->cols);
}

void lm_sort_walk(lm_plan_walk *w, lm_step *step, int i) {
  (void)i;
  lm_sort *s = &step->sort;
  if (w->d) {
    PUT(w->d, s->dtype);
    PUT(w->d, s->in_pos);
    PUT(w->d, s->descending);
  }
  number(w, &s->rows);
  number(w, &s->n);
  number(w, &s->k);
}

/* Every field of every step that a run reads (runtime/exec.c): a new field of
 * lm_step must be described here too, or an instance would run with the
 * template's value of it. */
static void walk_plan(walk *w, lm_plan *p) {
  if (w->d && (!(w->d->kfirst = calloc((size_t)p->nsteps + 1, sizeof(int))) ||
               !(w->d->kcount = calloc((size_t)p->nsteps + 1, sizeof(int))))) {
    w->d->oom = true;
    return;
  }
  if (w->d) {
    PUT(w->d, p->nnodes);
    PUT(w->d, p->ntemps);
    PUT(w->d, p->nsteps);
    PUT_ARRAY(w->d, p->published, p->nnodes);
    PUT_ARRAY(w->d, p->materialized, p->nnodes);
  }
  for (int i = 0; i < p->nsteps; i++) {
    lm_step *s = &p->steps[i];
    if (w->d) {
      PUT(w->d, s->kind);
      PUT(w->d, s->out);
      PUT(w->d, s->dtype);
      PUT(w->d, s->deferred);
      PUT(w->d, s->gemm_partner);
      PUT(w->d, s->gemm_slot);
      PUT(w->d, s->b_producer);
      PUT(w->d, s->donor);
      PUT(w->d, s->nfree);
      PUT_ARRAY(w->d, s->free_after, s->nfree);
    }
    number(w, &s->outer);
    lm_step_kind_runtimes[s->kind]->walk(w, s, i);
  }
}

static void desc_free(desc *d) {
  free(d->shape);
  free(d->num);
  free(d->kfirst);
  free(d->kcount);
  *d = (desc){0};
}

/* Plans p at values and describes the plan; *plan (NULL to drop it) gets it.
 * False when it cannot be planned there or holds what no template does. */
static bool plan_described(const loom_program *p, const int64_t *values, desc *d, lm_plan **plan,
                           bool counted) {
  *d = (desc){0};
  if (plan) *plan = NULL;
  lm_binding *b;
  lm_errors_quiet_begin(); /* a size that does not fit the program is an answer here */
  loom_status st = lm_program_plan_at(OP, p, values, &b);
  lm_errors_quiet_end();
  if (st != LOOM_OK) return false;
  if (counted) lm_stat_add(LM_STAT_PROGRAM_SIZES_PLANNED, 1);
  walk w = {.d = d};
  walk_plan(&w, b->plan);
  bool ok = !d->oom && !d->unfit;
  if (ok && plan) *plan = b->plan, b->plan = NULL;
  lm_program_binding_free(p, b);
  if (!ok) desc_free(d);
  return ok;
}

/* The template's numbers at values into out; false on overflow. */
static bool evaluate(const lm_plan_template *t, const int64_t *values, int64_t *out) {
  for (int i = 0; i < t->nnum; i++)
    if ((out[i] = lm_sym_eval(&t->num[i], values)) == INT64_MIN) return false;
  return true;
}

/* Whether d is the template's plan at values. */
static bool agrees(const lm_plan_template *t, const int64_t *values, const desc *d) {
  if (d->nshape != t->nshape || memcmp(d->shape, t->shape, t->nshape) != 0 || d->nnum != t->nnum)
    return false;
  for (int i = 0; i < t->nnum; i++)
    if (lm_sym_eval(&t->num[i], values) != d->num[i]) return false;
  return true;
}

static bool agrees_at(const lm_plan_template *t, const loom_program *p, const int64_t *values) {
  desc d;
  if (!plan_described(p, values, &d, NULL, true)) return false;
  bool ok = agrees(t, values, &d);
  desc_free(&d);
  return ok;
}

/* ------------------------------------------------------------ making one */

void lm_plan_template_free(lm_plan_template *t) {
  if (!t) return;
  for (int i = 0; t->vary && i < t->nsteps; i++) free(t->vary[i]);
  free(t->vary);
  free(t->nall);
  lm_plan_free(t->plan);
  free(t->shape);
  free(t->num);
  pthread_mutex_destroy(&t->lock);
  free(t);
}

/* Which sizes of each kernel step vary over the box (their polynomials are
 * not constants): its compiled kernel reads those at run time and keeps the
 * rest (a row length, a fixed stride) as constants the backend can use. */
static bool mark_varying(lm_plan_template *t, const lm_plan *plan, const desc *d) {
  bool cuda = t->device.type == LOOM_DEVICE_CUDA;
  t->nsteps = plan->nsteps;
  if (!(t->nall = calloc((size_t)plan->nsteps + 1, sizeof *t->nall)) ||
      !(t->vary = calloc((size_t)plan->nsteps + 1, sizeof *t->vary)))
    return false;
  for (int i = 0; i < plan->nsteps; i++) {
    if (plan->steps[i].kind != LM_STEP_KERNEL) continue;
    int n = t->nall[i] = d->kcount[i];
    if (!(t->vary[i] = calloc((size_t)n + 1, 1))) return false;
    int varying = 0;
    for (int j = 0; j < n; j++)
      varying += t->vary[i][j] = !lm_sym_is_const(&t->num[d->kfirst[i] + j]);
    if (cuda && varying > lm_cuda_max_sizes()) return false; /* more than a launch passes */
  }
  return true;
}

/* The fit's grid points, then the checks: e + 5, then 2e + 10. */
static void sample_values(const loom_program *p, int i, int ngrid, int64_t *values) {
  if (i < ngrid) {
    lm_sym_fit_point(p->nsym, p->sym_example, i, values);
    return;
  }
  for (int j = 0; j < p->nsym; j++) values[j] = (i - ngrid + 1) * (p->sym_example[j] + 5 + j);
}

loom_status lm_plan_template_make(const loom_program *p, lm_plan_template **out) {
  *out = NULL;
  int k = p->nsym;
  if (k < 1 || k > LM_SYM_FIT_MAX_SYMBOLS) return LOOM_OK;
  int ngrid = 1;
  for (int j = 0; j < k; j++) ngrid *= LM_SYM_FIT_GRID;
  int nsamples = ngrid + CHECKS;
  desc *d = calloc((size_t)nsamples, sizeof *d);
  int64_t(*values)[LM_SYM_MAX_SYMBOLS] = calloc((size_t)nsamples, sizeof *values);
  int64_t *vals = calloc((size_t)ngrid, sizeof *vals);
  lm_plan_template *t = calloc(1, sizeof *t);
  lm_plan *plan = NULL;
  loom_status st = LOOM_OK;
  if (!d || !values || !vals || !t || pthread_mutex_init(&t->lock, NULL) != 0) {
    free(t);
    t = NULL;
    st = lm_fail(LOOM_ERR_OOM, OP ": out of memory");
    goto done;
  }
  t->k = k;
  t->device = p->device;
  bool ok = true;
  for (int i = 0; i < nsamples && ok; i++) {
    sample_values(p, i, ngrid, values[i]);
    ok = plan_described(p, values[i], &d[i], i == 0 ? &plan : NULL, true);
    ok = ok && d[i].nshape == d[0].nshape && memcmp(d[i].shape, d[0].shape, d[0].nshape) == 0 &&
         d[i].nnum == d[0].nnum;
  }
  if (ok && !(t->num = calloc((size_t)d[0].nnum + 1, sizeof *t->num))) ok = false;
  for (int n = 0; ok && n < d[0].nnum; n++) {
    for (int g = 0; g < ngrid; g++) vals[g] = d[g].num[n];
    ok = lm_sym_fit(k, p->sym_example, vals, &t->num[n]);
    for (int c = ngrid; ok && c < nsamples; c++)
      ok = lm_sym_eval(&t->num[n], values[c]) == d[c].num[n];
  }
  if (ok) {
    t->nnum = d[0].nnum;
    t->shape = d[0].shape, t->nshape = d[0].nshape;
    d[0].shape = NULL;
    for (int j = 0; j < k; j++) t->lo[j] = values[0][j], t->hi[j] = values[nsamples - 1][j];
    ok = mark_varying(t, plan, &d[0]);
  }
  if (ok) {
    st = lm_exec_compile_lifted(plan, p->device, t->vary);
    if (st == LOOM_OK) t->plan = plan, plan = NULL;
  }
  if (ok && st == LOOM_OK) *out = t, t = NULL;
done:
  for (int i = 0; d && i < nsamples; i++) desc_free(&d[i]);
  free(d);
  free(values);
  free(vals);
  lm_plan_free(plan);
  lm_plan_template_free(t);
  return st;
}

/* ------------------------------------------------------------ instances */

static bool in_box(const lm_plan_template *t, const int64_t *values) {
  for (int j = 0; j < t->k; j++)
    if (values[j] < t->lo[j] || values[j] > t->hi[j]) return false;
  return true;
}

/* Grows the box to hold values when the plans at the grown box's corners
 * agree: first the box grown twice as far as needed (halved downwards),
 * then just enough; with one symbol, a box grown just enough then reaches
 * by bisection towards where the far attempt failed (a limit such as a
 * position table's length, met once rather than at every size up to it). */
#define GROW_BISECTIONS 10

/* One symbol: the size furthest from `good` towards `bad` where the plan
 * still agrees (the plan agrees at good, not at bad). */
static int64_t bisect(const lm_plan_template *t, const loom_program *p, int64_t good, int64_t bad) {
  for (int i = 0; i < GROW_BISECTIONS && (bad - good > 1 || good - bad > 1); i++) {
    int64_t mid = good + (bad - good) / 2;
    if (agrees_at(t, p, &mid))
      good = mid;
    else
      bad = mid;
  }
  return good;
}

static void grow(lm_plan_template *t, const loom_program *p, const int64_t *values) {
  size_t bytes = sizeof(int64_t) * (size_t)t->k;
  int64_t far[2][LM_SYM_MAX_SYMBOLS];
  for (int attempt = 0; attempt < 2; attempt++) {
    int64_t lo[LM_SYM_MAX_SYMBOLS], hi[LM_SYM_MAX_SYMBOLS];
    for (int j = 0; j < t->k; j++) {
      int64_t v = values[j];
      lo[j] = t->lo[j], hi[j] = t->hi[j];
      if (v < lo[j]) lo[j] = attempt == 0 && v > lo[j] / 2 ? (lo[j] / 2 > 1 ? lo[j] / 2 : 1) : v;
      if (v > hi[j]) hi[j] = attempt == 0 && v < 2 * hi[j] ? 2 * hi[j] : v;
    }
    if (attempt == 1 && memcmp(lo, far[0], bytes) == 0 && memcmp(hi, far[1], bytes) == 0)
      return; /* the same corners again */
    if (attempt == 0) memcpy(far[0], lo, bytes), memcpy(far[1], hi, bytes);
    bool lo_same = memcmp(lo, t->lo, bytes) == 0, hi_same = memcmp(hi, t->hi, bytes) == 0;
    if (!(lo_same || agrees_at(t, p, lo)) || !(hi_same || agrees_at(t, p, hi))) continue;
    memcpy(t->lo, lo, bytes);
    memcpy(t->hi, hi, bytes);
    if (attempt == 0 || t->k != 1) return;
    t->hi[0] = bisect(t, p, hi[0], far[1][0]);
    t->lo[0] = bisect(t, p, lo[0], far[0][0]);
    return;
  }
}

/* The instance's schedule: the template's steps (their arrays shared) with
 * the numbers at values, its own kernel sizes and GEMM functions. */
static loom_status instantiate(const lm_plan_template *t, const int64_t *values, lm_plan **out) {
  *out = NULL;
  const lm_plan *base = t->plan;
  int64_t *nums = malloc(sizeof *nums * (size_t)(t->nnum + 1));
  lm_plan *s = calloc(1, sizeof *s);
  lm_step *steps = malloc(sizeof *steps * (size_t)(base->nsteps + 1));
  if (!nums || !s || !steps) {
    free(nums);
    free(s);
    free(steps);
    return lm_fail(LOOM_ERR_OOM, OP ": out of memory");
  }
  s->nnodes = base->nnodes, s->ntemps = base->ntemps, s->nsteps = base->nsteps;
  s->steps = steps;
  s->published = base->published, s->materialized = base->materialized;
  s->borrows_steps = true;
  s->release_code = base->release_code;
  atomic_init(&s->ranks_agree, false);
  if (base->nsteps) memcpy(steps, base->steps, sizeof *steps * (size_t)base->nsteps);
  for (int i = 0; i < s->nsteps; i++) { /* what the instance owns */
    steps[i].code = NULL;
    if (steps[i].kind == LM_STEP_KERNEL) steps[i].sizes = NULL;
    if (steps[i].kind == LM_STEP_COLLECTIVE) steps[i].coll.in_count = NULL;
  }
  loom_status st = LOOM_OK;
  for (int i = 0; i < s->nsteps && st == LOOM_OK; i++) {
    lm_collective *c = &steps[i].coll;
    if (steps[i].kind == LM_STEP_COLLECTIVE &&
        !(c->in_count = malloc(sizeof *c->in_count * (size_t)(c->nin + 1))))
      st = lm_fail(LOOM_ERR_OOM, OP ": out of memory");
  }
  if (st == LOOM_OK && !evaluate(t, values, nums))
    st = lm_fail(LOOM_ERR_SHAPE, OP ": a size of the plan overflows at these sizes");
  if (st == LOOM_OK) {
    walk w = {.vals = nums, .nvals = t->nnum, .t = t};
    walk_plan(&w, s);
    if (w.oom) st = lm_fail(LOOM_ERR_OOM, OP ": out of memory");
  }
  /* a CUDA GEMM's code serves every size: the template's (device_code) stays */
  for (int i = 0; i < s->nsteps && st == LOOM_OK && t->device.type == LOOM_DEVICE_CPU; i++)
    if (steps[i].kind == LM_STEP_GEMM) st = lm_gemm_prepare(&steps[i].gemm, &steps[i].code);
  free(nums);
  if (st != LOOM_OK) {
    lm_plan_free(s);
    return st;
  }
  *out = s;
  return LOOM_OK;
}

loom_status lm_plan_template_instance(lm_plan_template *t, const loom_program *p,
                                      const int64_t *values, lm_plan **out) {
  *out = NULL;
  pthread_mutex_lock(&t->lock);
  if (!in_box(t, values)) grow(t, p, values);
  bool inside = in_box(t, values);
  pthread_mutex_unlock(&t->lock);
  if (!inside) return LOOM_OK;
  loom_status st = instantiate(t, values, out);
  if (st == LOOM_OK && lm_env_flag("LOOM_VERIFY_PLANS")) {
    desc d;
    bool planned = plan_described(p, values, &d, NULL, false); /* a check: not counted */
    bool ok = planned && agrees(t, values, &d);
    if (planned) desc_free(&d);
    if (!ok) {
      char at[256];
      lm_plan_free(*out);
      *out = NULL;
      st = lm_fail(LOOM_ERR_INTERNAL,
                   OP ": LOOM_VERIFY_PLANS: with %s the program's plan template differs from "
                      "the plan made at those sizes",
                   lm_program_values_str(p, values, at, sizeof at));
    }
  }
  if (*out) lm_stat_add(LM_STAT_PROGRAM_SIZES_FROM_TEMPLATE, 1);
  return st;
}
