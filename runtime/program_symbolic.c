/* Programs whose inputs take any size along named dims (loom_compile_symbolic):
 * every node dim is an expression over the symbols (passes/symbolic.c); a
 * run at sizes not seen before instantiates the graph at them, checks every
 * node (ir/verify.c), plans and compiles it. Its kernels come again from the
 * caches, shape-generic after the second size (runtime/compile.c); the plans
 * of the sizes used last are kept (runtime/program.h: LM_PROGRAM_PLANS*). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/exec.h"
#include "runtime/program.h"
#include "runtime/runtime.h"

#define OP "loom_compile_symbolic"

const char *lm_program_values_str(const loom_program *p, const int64_t *values, char *buf,
                                  size_t len) {
  size_t used = 0;
  buf[0] = 0;
  for (int s = 0; s < p->nsym && used < len; s++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s=%lld", s ? ", " : "", p->sym_names[s],
                             (long long)values[s]);
  return buf;
}

static void free_binding(lm_binding *b, int n) {
  if (!b) return;
  for (int i = 0; b->nodes && i < n; i++) lm_node_release(b->nodes[i]);
  free(b->nodes);
  if (b->plan) lm_plan_free(b->plan);
  free(b);
}

void lm_program_free_symbols(loom_program *p) {
  if (!p->symbolic) return;
  for (lm_binding *b = p->bound, *next; b; b = next) {
    next = b->next;
    free_binding(b, p->n);
  }
  p->bound = NULL;
  lm_plan_template_free(p->plan_template); /* after its instances */
  p->plan_template = NULL;
  for (int s = 0; p->sym_names && s < p->nsym; s++) free(p->sym_names[s]);
  free(p->sym_names);
  free(p->sym_example);
  free(p->in_sym);
  free(p->dims);
  free(p->counts);
  pthread_mutex_destroy(&p->bind_lock);
  p->nsym = 0;
  p->symbolic = false;
}

/* ------------------------------------------------------------ compiling */

static loom_status check_dims(const char *op, const loom_program *p, const loom_symbolic_dim *dims,
                              int ndims) {
  if (ndims < 0) return lm_fail(LOOM_ERR_VALUE, "%s: ndims is %d", op, ndims);
  if (ndims > 0 && !dims) return lm_fail(LOOM_ERR_NULL, "%s: dims is NULL", op);
  for (int i = 0; i < ndims; i++) {
    const loom_symbolic_dim *d = &dims[i];
    if (d->input < 0 || d->input >= p->nin)
      return lm_fail(LOOM_ERR_VALUE, "%s: dims[%d].input is %d, the program has %d inputs", op, i,
                     d->input, p->nin);
    const lm_node *in = p->in_nodes[d->input];
    if (d->axis < 0 || d->axis >= in->shape.ndim)
      return lm_fail(LOOM_ERR_VALUE, "%s: dims[%d].axis is %d, input %d ('%s') has %d dims", op, i,
                     d->axis, d->input, in->label, in->shape.ndim);
    if (!d->symbol) return lm_fail(LOOM_ERR_NULL, "%s: dims[%d].symbol is NULL", op, i);
    if (!lm_is_name(d->symbol, strlen(d->symbol)))
      return lm_fail(LOOM_ERR_VALUE,
                     "%s: dims[%d].symbol '%.80s' is not 1-64 letters, digits or '_' (not "
                     "starting with a digit)",
                     op, i, d->symbol);
    int64_t size = in->shape.dim[d->axis];
    if (size < 2)
      return lm_fail(LOOM_ERR_VALUE,
                     "%s: input %d ('%s') dim %d is %lld in the traced graph; a symbolic dim "
                     "must be traced at a size of at least 2 (a size of 1 broadcasts)",
                     op, d->input, in->label, d->axis, (long long)size);
    for (int j = 0; j < i; j++) {
      const lm_node *other = p->in_nodes[dims[j].input];
      if (dims[j].input == d->input && dims[j].axis == d->axis)
        return lm_fail(LOOM_ERR_VALUE, "%s: dims[%d] and dims[%d] both name input %d dim %d", op, j,
                       i, d->input, d->axis);
      if (strcmp(dims[j].symbol, d->symbol) == 0 && other->shape.dim[dims[j].axis] != size)
        return lm_fail(LOOM_ERR_SHAPE,
                       "%s: symbol '%s' is traced at %lld (input %d dim %d) and at %lld (input "
                       "%d dim %d)",
                       op, d->symbol, (long long)other->shape.dim[dims[j].axis], dims[j].input,
                       dims[j].axis, (long long)size, d->input, d->axis);
    }
  }
  return LOOM_OK;
}

/* The symbols named in dims, their traced sizes and which input dims take
 * them, into p. */
static loom_status name_symbols(const char *op, loom_program *p, const loom_symbolic_dim *dims,
                                int ndims) {
  p->sym_names = calloc(LM_SYM_MAX_SYMBOLS, sizeof *p->sym_names);
  p->sym_example = calloc(LM_SYM_MAX_SYMBOLS, sizeof *p->sym_example);
  p->in_sym = malloc(sizeof(int) * (size_t)(p->nin * LOOM_MAX_DIMS + 1));
  p->dims = calloc((size_t)p->n * LOOM_MAX_DIMS + 1, sizeof *p->dims);
  p->counts = calloc((size_t)p->n + 1, sizeof *p->counts);
  if (!p->sym_names || !p->sym_example || !p->in_sym || !p->dims || !p->counts)
    return lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
  for (int i = 0; i < p->nin * LOOM_MAX_DIMS; i++) p->in_sym[i] = -1;
  for (int i = 0; i < ndims; i++) {
    int s = 0;
    while (s < p->nsym && strcmp(p->sym_names[s], dims[i].symbol) != 0) s++;
    if (s == p->nsym) {
      if (s == LM_SYM_MAX_SYMBOLS)
        return lm_fail(LOOM_ERR_VALUE, "%s: more than %d symbols", op, LM_SYM_MAX_SYMBOLS);
      if (!(p->sym_names[s] = strdup(dims[i].symbol)))
        return lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
      p->sym_example[s] = dims[i].input >= 0
                              ? p->in_nodes[dims[i].input]->shape.dim[dims[i].axis]
                              : p->nodes[LM_SYM_DIM_POS(dims[i].input)]->shape.dim[dims[i].axis];
      p->nsym++;
    }
    if (dims[i].input >= 0) p->in_sym[dims[i].input * LOOM_MAX_DIMS + dims[i].axis] = s;
  }
  return LOOM_OK;
}

/* Every node dim's expression, from the program's own graph. */
static loom_status infer_dims(const char *op, loom_program *p, const loom_symbolic_dim *dims,
                              int ndims, bool numbers_checked) {
  lm_node **targets = malloc(sizeof *targets * (size_t)p->nout);
  lm_sym_seed *seeds = malloc(sizeof *seeds * (size_t)(p->nin * LOOM_MAX_DIMS + ndims + 1));
  if (!targets || !seeds) {
    free(targets), free(seeds);
    return lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
  }
  int nseeds = 0;
  for (int i = 0; i < p->nin; i++)
    for (int d = 0; d < LOOM_MAX_DIMS && p->in_pos[i] >= 0; d++)
      if (p->in_sym[i * LOOM_MAX_DIMS + d] >= 0)
        seeds[nseeds++] = (lm_sym_seed){p->in_pos[i], d, p->in_sym[i * LOOM_MAX_DIMS + d]};
  for (int i = 0; i < ndims; i++) { /* dims at graph positions (lazy families) */
    if (dims[i].input >= 0) continue;
    int s = 0;
    while (s < p->nsym && strcmp(p->sym_names[s], dims[i].symbol) != 0) s++;
    seeds[nseeds++] = (lm_sym_seed){LM_SYM_DIM_POS(dims[i].input), dims[i].axis, s};
  }
  for (int i = 0; i < p->nout; i++) targets[i] = p->nodes[p->out_pos[i]];
  lm_graph g;
  loom_status st = lm_graph_build(&g, targets, p->nout);
  if (st == LOOM_OK && g.n != p->n) st = LOOM_ERR_INTERNAL;
  char err[2048];
  if (st == LOOM_OK) {
    st = lm_sym_infer(&g, (const char *const *)p->sym_names, p->sym_example, p->nsym, seeds, nseeds,
                      numbers_checked, p->dims, p->counts, &p->ncounts, err, sizeof err);
    if (st != LOOM_OK) st = lm_fail(st, "%s: %s", op, err);
  } else {
    st = lm_fail(st == LOOM_ERR_OOM ? st : LOOM_ERR_INTERNAL, "%s: could not walk the graph", op);
  }
  lm_graph_free(&g);
  free(targets), free(seeds);
  return st;
}

loom_status lm_program_make_symbolic(const char *op, loom_program *p, const loom_symbolic_dim *dims,
                                     int ndims) {
  loom_status st = check_dims(op, p, dims, ndims);
  if (st != LOOM_OK || ndims == 0) return st;
  if (pthread_mutex_init(&p->bind_lock, NULL) != 0)
    return lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
  p->symbolic = true;
  st = name_symbols(op, p, dims, ndims);
  if (st == LOOM_OK) st = infer_dims(op, p, dims, ndims, false);
  return st;
}

loom_status lm_program_make_symbolic_at(const char *op, loom_program *p,
                                        const loom_symbolic_dim *dims, int ndims) {
  for (int i = 0; i < ndims; i++) {
    int pos = LM_SYM_DIM_POS(dims[i].input);
    if (dims[i].input < 0 && (pos >= p->n || dims[i].axis >= p->nodes[pos]->shape.ndim ||
                              p->nodes[pos]->shape.dim[dims[i].axis] < 2))
      return lm_fail(LOOM_ERR_VALUE, "%s: no symbol at node %d dim %d", op, pos, dims[i].axis);
    loom_status st = dims[i].input >= 0 ? check_dims(op, p, &dims[i], 1) : LOOM_OK;
    if (st != LOOM_OK) return st;
  }
  if (ndims == 0) return LOOM_OK;
  if (pthread_mutex_init(&p->bind_lock, NULL) != 0)
    return lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
  p->symbolic = true;
  loom_status st = name_symbols(op, p, dims, ndims);
  if (st == LOOM_OK) st = infer_dims(op, p, dims, ndims, true);
  return st;
}

loom_program *loom_compile_symbolic(loom_tensor *const *outs, int nout, loom_tensor *const *ins,
                                    int nin, const loom_symbolic_dim *dims, int ndims) {
  if (ndims < 0 || (ndims > 0 && !dims)) { /* before compiling for nothing */
    check_dims(OP, NULL, dims, ndims);
    return NULL;
  }
  loom_program *p = loom_compile(outs, nout, ins, nin);
  if (p && lm_program_make_symbolic(OP, p, dims, ndims) != LOOM_OK) {
    loom_program_free(p);
    return NULL;
  }
  return p;
}

/* ------------------------------------------------------------ running */

static bool same_values(const loom_program *p, const int64_t *a, const int64_t *b) {
  for (int s = 0; s < p->nsym; s++)
    if (a[s] != b[s]) return false;
  return true;
}

/* The graph at values: nodes in the program's positions, each checked. */
static loom_status instantiate(const char *op, const loom_program *p, const int64_t *values,
                               lm_binding *b) {
  char at[256];
  lm_program_values_str(p, values, at, sizeof at);
  for (int pos = 0; pos < p->n; pos++) {
    const lm_node *n = p->nodes[pos];
    if (p->kind[pos] == LM_SLOT_WEIGHT) {
      lm_node_retain(p->nodes[pos]);
      b->nodes[pos] = p->nodes[pos];
      continue;
    }
    loom_shape shape = n->shape;
    for (int d = 0; d < shape.ndim; d++) {
      shape.dim[d] = lm_sym_eval(&p->dims[pos * LOOM_MAX_DIMS + d], values);
      if (shape.dim[d] < 0) {
        char e[128];
        return lm_fail(LOOM_ERR_SHAPE, "%s: with %s, node %d (%s) dim %d = %s is %s", op, at, pos,
                       lm_op_name(n->op), d,
                       lm_sym_str(&p->dims[pos * LOOM_MAX_DIMS + d],
                                  (const char *const *)p->sym_names, e, sizeof e),
                       shape.dim[d] == INT64_MIN ? "too large" : "negative");
      }
    }
    if (lm_shape_numel(&shape) < 0)
      return lm_fail(LOOM_ERR_SHAPE, "%s: with %s, node %d (%s) has too many elements", op, at, pos,
                     lm_op_name(n->op));
    lm_node *src_small[8], **src = src_small;
    int nsrc = p->src_start[pos + 1] - p->src_start[pos];
    if (nsrc > 8 && !(src = malloc(sizeof *src * (size_t)nsrc)))
      return lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
    for (int s = 0; s < nsrc; s++) src[s] = b->nodes[p->src_pos[p->src_start[pos] + s]];
    lm_node *c = lm_node_new(n->op, nsrc, src, shape, n->dtype, n->device);
    if (src != src_small) free(src);
    if (!c) return lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
    c->arg = n->arg;
    for (int d = 0; d < shape.ndim; d++) { /* bounds from the end keep their distance from it */
      if (n->op == LM_SLICE && (n->arg.slice.from_end[d] & LM_SLICE_START_FROM_END))
        c->arg.slice.start[d] =
            c->src[0]->shape.dim[d] - (n->src[0]->shape.dim[d] - n->arg.slice.start[d]);
      if (n->op == LM_IOTA && n->arg.iota.from_end && d == 0) /* its distance from the count */
        c->arg.iota.start = (double)lm_shape_numel(&c->shape) -
                            ((double)lm_shape_numel(&n->shape) - n->arg.iota.start);
      if (n->op == LM_PAD && n->arg.pad.lo_from_end[d]) /* the high pad stays */
        c->arg.pad.lo[d] = c->shape.dim[d] - c->src[0]->shape.dim[d] -
                           (n->shape.dim[d] - n->src[0]->shape.dim[d] - n->arg.pad.lo[d]);
    }
    if (n->op == LM_SORT && n->arg.sort.full) /* a whole sort keeps the row's length */
      c->arg.sort.k = c->shape.dim[c->shape.ndim - 1];
    for (int i = 0; i < p->ncounts; i++)
      if (p->counts[i].pos == pos) c->arg.f = (double)lm_sym_eval(&p->counts[i].value, values);
    b->nodes[pos] = c;
    if (n->op == LM_INPUT && n->label && !(c->label = strdup(n->label)))
      return lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
    char why[256];
    if (n->op != LM_INPUT && !lm_node_verify(c, why, sizeof why))
      return lm_fail(LOOM_ERR_SHAPE, "%s: with %s, node %d (%s) is invalid: %s", op, at, pos,
                     lm_op_name(n->op), why);
  }
  return LOOM_OK;
}

/* Plans the instantiated graph; its canonical order must be the program's,
 * so that every table indexed by position holds. */
static loom_status plan_binding(const char *op, const loom_program *p, lm_binding *b) {
  lm_node **targets = malloc(sizeof *targets * (size_t)p->nout);
  if (!targets) return lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
  for (int i = 0; i < p->nout; i++) targets[i] = b->nodes[p->out_pos[i]];
  lm_graph g;
  loom_status st = lm_graph_build(&g, targets, p->nout);
  free(targets);
  if (st != LOOM_OK) return lm_fail(st, "%s: out of memory collecting the graph", op);
  bool same = g.n == p->n;
  for (int pos = 0; same && pos < p->n; pos++) same = g.nodes[pos] == b->nodes[pos];
  char err[1024];
  if (!same)
    st = lm_fail(LOOM_ERR_INTERNAL, "%s: the graph at new sizes lost the program's order", op);
  else if ((st = lm_plan_make(&g, loom_fusion_enabled(), &b->plan, err, sizeof err)) != LOOM_OK)
    st = lm_fail(st, "%s: %s", op, err);
  else if (p->lazy && loom_fusion_enabled())
    lm_plan_more_outputs(b->plan, p->device.type == LOOM_DEVICE_CPU); /* as plan_and_compile */
  lm_graph_free(&g);
  return st;
}

loom_status lm_program_plan_at(const char *op, const loom_program *p, const int64_t *values,
                               lm_binding **out) {
  lm_binding *b = calloc(1, sizeof *b);
  if (!b || !(b->nodes = calloc((size_t)p->n + 1, sizeof *b->nodes))) {
    free(b);
    return lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
  }
  memcpy(b->values, values, sizeof(int64_t) * (size_t)p->nsym);
  loom_status st = instantiate(op, p, values, b);
  if (st == LOOM_OK) st = plan_binding(op, p, b);
  if (st != LOOM_OK) {
    free_binding(b, p->n);
    b = NULL;
  }
  *out = b;
  return st;
}

void lm_program_binding_free(const loom_program *p, lm_binding *b) { free_binding(b, p->n); }

loom_status lm_program_graph_hash_at(const loom_program *p, const int64_t *values,
                                     const uint8_t *clear_from_end, lm_hash128 *out) {
  lm_binding *b = calloc(1, sizeof *b);
  if (!b || !(b->nodes = calloc((size_t)p->n + 1, sizeof *b->nodes))) {
    free(b);
    return lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory");
  }
  loom_status st = instantiate("loom_realize", p, values, b);
  lm_node **targets = st == LOOM_OK ? malloc(sizeof *targets * (size_t)p->nout) : NULL;
  if (st == LOOM_OK && !targets) st = lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory");
  for (int pos = 0; st == LOOM_OK && clear_from_end && pos < p->n; pos++)
    for (int d = 0; b->nodes[pos]->op == LM_SLICE && d < LOOM_MAX_DIMS; d++)
      b->nodes[pos]->arg.slice.from_end[d] &= (uint8_t)~clear_from_end[pos * LOOM_MAX_DIMS + d];
  if (st == LOOM_OK) {
    for (int i = 0; i < p->nout; i++) targets[i] = b->nodes[p->out_pos[i]];
    lm_graph g;
    if ((st = lm_graph_build(&g, targets, p->nout)) == LOOM_OK) *out = g.hash;
    lm_graph_free(&g);
  }
  free(targets);
  free_binding(b, p->n);
  return st;
}

loom_shape lm_program_shape_at(const loom_program *p, int pos, const int64_t *values) {
  loom_shape shape = p->nodes[pos]->shape;
  for (int d = 0; p->symbolic && d < shape.ndim; d++)
    shape.dim[d] = lm_sym_eval(&p->dims[pos * LOOM_MAX_DIMS + d], values);
  return shape;
}

/* The values of the symbols in this run's inputs, each dim checked. */
static loom_status read_values(const loom_program *p, loom_tensor *const *ins, int64_t *values,
                               loom_shape *want) {
  const char *op = "loom_program_run";
  int from[LM_SYM_MAX_SYMBOLS][2];
  for (int s = 0; s < p->nsym; s++) values[s] = -1;
  for (int i = 0; i < p->nin; i++) {
    const lm_node *in = p->in_nodes[i];
    want[i] = in->shape;
    if (!ins[i] || !ins[i]->node) continue; /* lm_program_check_inputs says */
    const loom_shape *got = &ins[i]->node->shape;
    if (got->ndim != in->shape.ndim) continue; /* likewise */
    for (int d = 0; d < got->ndim; d++) {
      int s = p->in_sym[i * LOOM_MAX_DIMS + d];
      if (s < 0) continue;
      int64_t v = got->dim[d];
      if (v < 1)
        return lm_fail(LOOM_ERR_SHAPE,
                       "%s: input %d ('%s') dim %d is %lld: symbol '%s' takes sizes of at least 1",
                       op, i, in->label, d, (long long)v, p->sym_names[s]);
      if (values[s] < 0) {
        values[s] = v, from[s][0] = i, from[s][1] = d;
      } else if (values[s] != v) {
        return lm_fail(LOOM_ERR_SHAPE,
                       "%s: symbol '%s' is %lld in input %d ('%s') dim %d but %lld in input %d "
                       "('%s') dim %d",
                       op, p->sym_names[s], (long long)values[s], from[s][0],
                       p->in_nodes[from[s][0]]->label, from[s][1], (long long)v, i, in->label, d);
      }
      want[i].dim[d] = v;
    }
  }
  for (int s = 0; s < p->nsym; s++)
    if (values[s] < 0) values[s] = p->sym_example[s]; /* only on unused or refused inputs */
  return LOOM_OK;
}

loom_status lm_program_bind(const loom_program *p, loom_tensor *const *ins, lm_binding **out) {
  *out = NULL;
  int64_t values[LM_SYM_MAX_SYMBOLS];
  loom_shape want_small[8] = {{0}}, *want = want_small;
  if (p->nin > 8 && !(want = malloc(sizeof *want * (size_t)p->nin)))
    return lm_fail(LOOM_ERR_OOM, "loom_program_run: out of memory");
  loom_status st = read_values(p, ins, values, want);
  if (st == LOOM_OK) st = lm_program_check_inputs(p, ins, want);
  if (want != want_small) free(want);
  if (st != LOOM_OK || same_values(p, values, p->sym_example)) return st;
  return lm_program_bind_values(p, values, out);
}

loom_status lm_program_bind_values(const loom_program *p, const int64_t *values, lm_binding **out) {
  *out = NULL;
  loom_status st = LOOM_OK;
  loom_program *mp = (loom_program *)p; /* the plans kept are its mutable cache */
  pthread_mutex_lock(&mp->bind_lock);
  for (lm_binding **at = &mp->bound; *at; at = &(*at)->next) {
    lm_binding *b = *at;
    if (!same_values(p, b->values, values)) continue;
    b->users++;
    *at = b->next; /* to the front */
    b->next = mp->bound;
    mp->bound = b;
    pthread_mutex_unlock(&mp->bind_lock);
    *out = b;
    return LOOM_OK;
  }
  bool make_template =
      mp->template_state == LM_TEMPLATE_UNTRIED && loom_dynamic_mode() != LOOM_DYNAMIC_OFF;
  if (make_template) mp->template_state = LM_TEMPLATE_MAKING;
  pthread_mutex_unlock(&mp->bind_lock);
  if (make_template) { /* others plan their sizes alone meanwhile */
    lm_plan_template *t = NULL;
    st = lm_plan_template_make(p, &t);
    pthread_mutex_lock(&mp->bind_lock);
    mp->plan_template = t;
    mp->template_state = LM_TEMPLATE_DONE;
    pthread_mutex_unlock(&mp->bind_lock);
    if (st != LOOM_OK) return st;
  }
  lm_binding *b = NULL;
  lm_plan *instance = NULL;
  pthread_mutex_lock(&mp->bind_lock);
  lm_plan_template *t = mp->template_state == LM_TEMPLATE_DONE ? mp->plan_template : NULL;
  pthread_mutex_unlock(&mp->bind_lock);
  if (t && (st = lm_plan_template_instance(t, p, values, &instance)) != LOOM_OK) return st;
  if (instance) {
    if (!(b = calloc(1, sizeof *b))) {
      lm_plan_free(instance);
      return lm_fail(LOOM_ERR_OOM, "loom_program_run: out of memory");
    }
    memcpy(b->values, values, sizeof(int64_t) * (size_t)p->nsym);
    b->plan = instance;
  } else {
    if ((st = lm_program_plan_at("loom_program_run", p, values, &b)) != LOOM_OK) return st;
    if ((st = lm_exec_compile(b->plan, p->device)) != LOOM_OK) {
      free_binding(b, p->n);
      return st;
    }
    lm_stat_add(LM_STAT_PROGRAM_SIZES_PLANNED, 1);
  }
  b->users = 1;
  pthread_mutex_lock(&mp->bind_lock);
  b->next = mp->bound;
  mp->bound = b;
  /* the most recent LM_PROGRAM_PLANS_KEPT stay; then as many as the node
   * budget holds, up to LM_PROGRAM_PLANS; of the rest, those not in use go */
  int kept = 0;
  int64_t nodes = 0;
  for (lm_binding **at = &mp->bound; *at;) {
    lm_binding *x = *at;
    kept++;
    nodes += x->nodes ? p->n : x->plan->nsteps; /* an instance holds its steps alone */
    bool over =
        kept > LM_PROGRAM_PLANS || (kept > LM_PROGRAM_PLANS_KEPT && nodes > LM_PROGRAM_PLAN_NODES);
    if (over && x->users == 0) {
      *at = x->next;
      free_binding(x, p->n);
      continue;
    }
    at = &x->next;
  }
  pthread_mutex_unlock(&mp->bind_lock);
  *out = b;
  return LOOM_OK;
}

void lm_program_unbind(const loom_program *p, lm_binding *b) {
  if (!b) return;
  loom_program *mp = (loom_program *)p;
  pthread_mutex_lock(&mp->bind_lock);
  b->users--;
  pthread_mutex_unlock(&mp->bind_lock);
}

/* ------------------------------------------------------------ signature */

int loom_program_num_symbols(const loom_program *p) { return p ? p->nsym : 0; }

const char *loom_program_symbol_name(const loom_program *p, int i) {
  return p && i >= 0 && i < p->nsym ? p->sym_names[i] : NULL;
}

const char *loom_program_input_dim_symbol(const loom_program *p, int i, int axis) {
  if (!p || !p->nsym || i < 0 || i >= p->nin || axis < 0 || axis >= LOOM_MAX_DIMS) return NULL;
  int s = p->in_sym[i * LOOM_MAX_DIMS + axis];
  return s >= 0 ? p->sym_names[s] : NULL;
}
