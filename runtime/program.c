/* Compiled programs: the graph between placeholders and outputs, cloned,
 * planned and compiled once; each run binds new inputs and executes the plan
 * without recording, hashing or looking anything up. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/exec.h"
#include "runtime/program.h"
#include "runtime/runtime.h"

const char *lm_program_output_label(int i, char buf[16]) {
  snprintf(buf, 16, "out%d", i);
  return buf;
}

static void program_free(loom_program *p) {
  if (!p) return;
  lm_program_free_symbols(p);
  for (int i = 0; p->nodes && i < p->n; i++) lm_node_release(p->nodes[i]);
  for (int i = 0; p->in_nodes && i < p->nin; i++) lm_node_release(p->in_nodes[i]);
  if (p->plan) lm_plan_free(p->plan);
  free(p->nodes);
  free(p->kind);
  free(p->input_of);
  free(p->src_start);
  free(p->src_pos);
  free(p->kernel_of);
  free(p->keys);
  free(p->in_pos);
  free(p->in_nodes);
  free(p->out_pos);
  for (int i = 0; p->out_names && i < p->nout; i++) free(p->out_names[i]);
  free(p->out_names);
  free(p);
}

void loom_program_free(loom_program *p) { program_free(p); }

/* How a lazy graph's program differs from a user's (lm_program_build_lazy):
 * its leaves become inputs, its slices may take from-end flags, and its
 * symbols are inferred before anything compiles. */
typedef struct lazy_spec {
  const uint8_t *from_end; /* NULL, or LOOM_MAX_DIMS flags per position */
  const loom_symbolic_dim *dims;
  int ndims;
} lazy_spec;

/* Copies the user's graph: computed nodes and placeholders are shared (a
 * lazy graph's computed nodes become inputs named "leaf<pos>"), every other
 * node is new, with the same op, arguments and (cloned) sources.
 * clones[pos] gets one reference each. */
static loom_status clone_graph(const lm_graph *g, const lazy_spec *lazy, lm_node **clones) {
  lm_no_grad_push(); /* a program computes values only */
  loom_status st = LOOM_OK;
  for (int pos = 0; pos < g->n && st == LOOM_OK; pos++) {
    lm_node *n = g->nodes[pos];
    if (lm_is_computed(n) && !lazy) {
      lm_node_retain(n);
      clones[pos] = n;
      continue;
    }
    lm_node *c = NULL;
    if (lm_is_computed(n)) {
      char label[32];
      snprintf(label, sizeof label, "leaf%d", pos);
      c = lm_node_new(LM_INPUT, 0, NULL, n->shape, n->dtype, n->device);
      if (c && !(c->label = strdup(label))) lm_node_release(c), c = NULL;
    } else {
      lm_node *src_small[8], **src = src_small;
      if (n->nsrc > 8 && !(src = malloc(sizeof(lm_node *) * (size_t)n->nsrc))) {
        st = LOOM_ERR_OOM;
        break;
      }
      for (int s = 0; s < n->nsrc; s++) src[s] = clones[lm_graph_pos(g, n->src[s])];
      if ((c = lm_node_new(n->op, n->nsrc, src, n->shape, n->dtype, n->device))) {
        c->arg = n->arg;
        c->fixed_dims = n->fixed_dims, c->made_by = n->made_by;
      }
      if (src != src_small) free(src);
    }
    if (!c) {
      st = LOOM_ERR_OOM;
      break;
    }
    for (int d = 0; lazy && lazy->from_end && n->op == LM_SLICE && d < n->shape.ndim; d++)
      c->arg.slice.from_end[d] |= lazy->from_end[pos * LOOM_MAX_DIMS + d];
    clones[pos] = c;
  }
  lm_no_grad_pop();
  return st;
}

static bool alloc_tables(loom_program *p, int nin, int nout) {
  size_t n = (size_t)p->n;
  p->kind = calloc(n + 1, sizeof *p->kind);
  p->input_of = malloc(sizeof(int) * (n + 1));
  p->src_start = calloc(n + 1, sizeof(int));
  p->kernel_of = malloc(sizeof(int) * (n + 1));
  p->keys = calloc(n + 1, sizeof *p->keys);
  p->in_pos = malloc(sizeof(int) * (size_t)(nin + 1));
  p->in_nodes = calloc((size_t)nin + 1, sizeof *p->in_nodes);
  p->out_pos = malloc(sizeof(int) * (size_t)(nout + 1));
  p->out_names = calloc((size_t)nout + 1, sizeof *p->out_names);
  for (int i = 0; p->out_names && i < nout; i++) {
    char name[16];
    if (!(p->out_names[i] = strdup(lm_program_output_label(i, name)))) return false;
  }
  return p->out_names && p->kind && p->input_of && p->src_start && p->kernel_of && p->keys &&
         p->in_pos && p->in_nodes && p->out_pos;
}

/* Positions, roles, sources and keys of the cloned graph (lm_graph_pos is
 * valid right after it was built). */
static loom_status fill_tables(loom_program *p, const lm_graph *g, lm_node *const *ins, int nin) {
  int nsrc = 0;
  for (int pos = 0; pos < p->n; pos++)
    nsrc += lm_is_computed(p->nodes[pos]) ? 0 : p->nodes[pos]->nsrc;
  p->src_pos = malloc(sizeof(int) * (size_t)(nsrc + 1));
  if (!p->src_pos) return LOOM_ERR_OOM;
  int at = 0;
  for (int pos = 0; pos < p->n; pos++) {
    lm_node *n = p->nodes[pos];
    p->input_of[pos] = -1;
    p->kernel_of[pos] = -1;
    p->src_start[pos] = at;
    p->kind[pos] = n->op == LM_INPUT   ? LM_SLOT_INPUT
                   : lm_is_computed(n) ? LM_SLOT_WEIGHT
                                       : LM_SLOT_NODE;
    if (p->kind[pos] != LM_SLOT_NODE) continue;
    for (int s = 0; s < n->nsrc; s++) p->src_pos[at++] = lm_graph_pos(g, n->src[s]);
    if (n->op == LM_RAND) p->keys[pos] = n->arg.rand.key.k;
  }
  p->src_start[p->n] = at;
  for (int i = 0; i < nin; i++) {
    p->in_pos[i] = -1;
    for (int pos = 0; pos < p->n; pos++)
      if (p->nodes[pos] == ins[i]) p->in_pos[i] = pos, p->input_of[pos] = i;
    lm_node_retain(ins[i]);
    p->in_nodes[i] = ins[i];
  }
  for (int i = 0; i < p->nout; i++) p->out_pos[i] = g->targets[i];
  return LOOM_OK;
}

/* Which kernel draws each node: a step's root and what its kernel inlines
 * (sources up to materialized nodes and leaves). */
static void assign_kernels(loom_program *p) {
  int *stack = malloc(sizeof(int) * (size_t)(p->n + 1));
  if (!stack) return; /* only the picture loses its clusters */
  for (int i = 0; i < p->plan->nsteps; i++) {
    int root = p->plan->steps[i].out;
    if (root >= p->n || p->kernel_of[root] >= 0) continue;
    int len = 0;
    p->kernel_of[root] = i;
    stack[len++] = root;
    while (len > 0) {
      int pos = stack[--len];
      for (int s = p->src_start[pos]; s < p->src_start[pos + 1]; s++) {
        int src = p->src_pos[s];
        if (p->kind[src] != LM_SLOT_NODE || p->plan->materialized[src] || p->kernel_of[src] >= 0)
          continue;
        p->kernel_of[src] = i;
        stack[len++] = src;
      }
    }
  }
  free(stack);
}

static loom_status check_placeholders(const char *op, const lm_graph *g, lm_node *const *ins,
                                      int nin) {
  for (int pos = 0; pos < g->n; pos++) {
    const lm_node *n = g->nodes[pos];
    if (n->op != LM_INPUT) continue;
    bool listed = false;
    for (int i = 0; i < nin; i++) listed |= ins[i] == n;
    if (!listed)
      return lm_fail(LOOM_ERR_VALUE, "%s: the outputs depend on input '%s', which is not among ins",
                     op, n->label ? n->label : "?");
  }
  return LOOM_OK;
}

static loom_status plan_and_compile(const char *op, loom_program *p, const lm_graph *g) {
  char err[1024];
  bool fuse = loom_fusion_enabled();
  loom_status st = lm_plan_make(g, fuse, &p->plan, err, sizeof err);
  if (st != LOOM_OK) return lm_fail(st, "%s: %s", op, err);
  if (fuse && p->lazy) lm_plan_more_outputs(p->plan, p->device.type == LOOM_DEVICE_CPU);
  assign_kernels(p);
  return lm_exec_compile(p->plan, p->device);
}

/* Compiles the program of graph user (its placeholders ins, or with lazy,
 * its leaves) into *out. */
static loom_status build(const char *op, const lm_graph *user, lm_node *const *ins, int nin,
                         const lazy_spec *lazy, loom_program **out) {
  *out = NULL;
  lm_graph own;
  memset(&own, 0, sizeof own);
  int nout = user->ntargets;
  loom_status st = LOOM_OK;
  for (int pos = 0; lazy && pos < user->n; pos++) nin += lm_is_computed(user->nodes[pos]);
  loom_program *p = calloc(1, sizeof *p);
  lm_node **targets = malloc(sizeof *targets * ((size_t)nout + 1));
  lm_node **leaves = lazy ? malloc(sizeof *leaves * ((size_t)nin + 1)) : NULL;
  if (p) {
    p->n = user->n, p->nin = nin, p->nout = nout;
    p->lazy = lazy != NULL;
    p->device = user->nodes[user->targets[0]]->device;
    p->nodes = calloc((size_t)user->n + 1, sizeof *p->nodes);
  }
  if (!p || !targets || (lazy && !leaves) || !p->nodes || !alloc_tables(p, nin, nout) ||
      clone_graph(user, lazy, p->nodes) != LOOM_OK)
    st = lm_fail(LOOM_ERR_OOM, "%s: out of memory copying the graph", op);
  for (int pos = 0, i = 0; st == LOOM_OK && lazy && pos < user->n; pos++)
    if (lm_is_computed(user->nodes[pos])) leaves[i++] = p->nodes[pos];
  if (lazy) ins = leaves;
  if (st == LOOM_OK) {
    for (int i = 0; i < nout; i++) targets[i] = p->nodes[user->targets[i]];
    if (lm_graph_build(&own, targets, nout) != LOOM_OK || own.n != p->n)
      st = lm_fail(LOOM_ERR_OOM, "%s: out of memory collecting the graph", op);
  }
  /* a lazy graph's symbols name its positions: the copy must keep them */
  for (int pos = 0; st == LOOM_OK && lazy && pos < p->n; pos++)
    if (own.nodes[pos] != p->nodes[pos])
      st = lm_fail(LOOM_ERR_INTERNAL, "%s: the graph's copy orders its nodes differently", op);
  if (st == LOOM_OK) {
    memcpy(p->nodes, own.nodes, sizeof *p->nodes * (size_t)p->n); /* same nodes, own order */
    if (fill_tables(p, &own, ins, nin) != LOOM_OK)
      st = lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
  }
  if (st == LOOM_OK && lazy) /* before anything compiles: a refusal is cheap */
    st = lm_program_make_symbolic_at(op, p, lazy->dims, lazy->ndims);
  if (st == LOOM_OK) st = plan_and_compile(op, p, &own);
  free(targets);
  free(leaves);
  lm_graph_free(&own);
  if (st != LOOM_OK) {
    program_free(p);
    return st;
  }
  *out = p;
  return LOOM_OK;
}

loom_status lm_program_build(const char *op, lm_node *const *outs, int nout, lm_node *const *ins,
                             int nin, loom_program **out) {
  *out = NULL;
  lm_graph user;
  loom_status st = lm_graph_build(&user, outs, nout);
  if (st != LOOM_OK) return lm_fail(st, "%s: out of memory collecting the graph", op);
  if ((st = check_placeholders(op, &user, ins, nin)) == LOOM_OK)
    st = build(op, &user, ins, nin, NULL, out);
  lm_graph_free(&user);
  return st;
}

loom_status lm_program_build_lazy(const char *op, const lm_graph *g, const uint8_t *from_end,
                                  const loom_symbolic_dim *dims, int ndims, loom_program **out) {
  lazy_spec lazy = {from_end, dims, ndims};
  return build(op, g, NULL, 0, &lazy, out);
}

loom_program *loom_compile(loom_tensor *const *outs, int nout, loom_tensor *const *ins, int nin) {
  const char *op = "loom_compile";
  if (!outs || (nin > 0 && !ins)) {
    lm_fail(LOOM_ERR_NULL, "%s: %s is NULL", op, outs ? "ins" : "outs");
    return NULL;
  }
  if (nout < 1 || nin < 0) {
    lm_fail(LOOM_ERR_VALUE, "%s: needs nout >= 1 (got %d) and nin >= 0 (got %d)", op, nout, nin);
    return NULL;
  }
  lm_node **nodes = malloc(sizeof(lm_node *) * (size_t)(nout + nin));
  if (!nodes) {
    lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
    return NULL;
  }
  loom_status st = LOOM_OK;
  char a[24], b[24];
  for (int i = 0; i < nout + nin && st == LOOM_OK; i++) {
    const loom_tensor *t = i < nout ? outs[i] : ins[i - nout];
    const char *what = i < nout ? "outs" : "ins";
    int k = i < nout ? i : i - nout;
    if (!t)
      st = lm_fail(LOOM_ERR_NULL, "%s: %s[%d] is NULL", op, what, k);
    else if (!t->node)
      st = lm_fail(t->status, "%s: %s[%d] is an error tensor: %s", op, what, k,
                   t->message ? t->message : "");
    else if (i > 0 && !lm_device_eq(t->node->device, nodes[0]->device))
      st = lm_fail(LOOM_ERR_DEVICE,
                   "%s: %s[%d] is on %s, outs[0] on %s: a program runs on one device", op, what, k,
                   lm_device_str(t->node->device, a, sizeof a),
                   lm_device_str(nodes[0]->device, b, sizeof b));
    else if (i >= nout && t->node->op != LM_INPUT)
      st = lm_fail(LOOM_ERR_VALUE, "%s: ins[%d] is not a placeholder made by loom_input", op, k);
    for (int j = nout; j < i && st == LOOM_OK && i >= nout; j++)
      if (nodes[j] == t->node)
        st = lm_fail(LOOM_ERR_VALUE, "%s: ins[%d] and ins[%d] are the same input '%s'", op,
                     j - nout, k, t->node->label);
    if (st == LOOM_OK) nodes[i] = t->node;
  }
  loom_program *p = NULL;
  if (st == LOOM_OK) lm_program_build(op, nodes, nout, nodes + nout, nin, &p);
  free(nodes);
  return p;
}

/* ------------------------------------------------------------ running */

loom_status lm_program_check_inputs(const loom_program *p, loom_tensor *const *ins,
                                    const loom_shape *want_shape) {
  const char *op = "loom_program_run";
  for (int i = 0; i < p->nin; i++) {
    const loom_tensor *t = ins[i];
    const lm_node *want = p->in_nodes[i];
    const loom_shape *shape = want_shape ? &want_shape[i] : &want->shape;
    char a[96], b[96];
    if (!t) return lm_fail(LOOM_ERR_NULL, "%s: input %d ('%s') is NULL", op, i, want->label);
    if (!t->node)
      return lm_fail(t->status, "%s: input %d ('%s') is an error tensor: %s", op, i, want->label,
                     t->message ? t->message : "");
    if (!lm_shape_eq(&t->node->shape, shape))
      return lm_fail(LOOM_ERR_SHAPE, "%s: input %d ('%s') has shape %s, the program takes %s", op,
                     i, want->label, lm_shape_str(&t->node->shape, a, sizeof a),
                     lm_shape_str(shape, b, sizeof b));
    if (t->node->dtype != want->dtype)
      return lm_fail(LOOM_ERR_DTYPE, "%s: input %d ('%s') is %s, the program takes %s", op, i,
                     want->label, loom_dtype_name(t->node->dtype), loom_dtype_name(want->dtype));
    if (!lm_device_eq(t->node->device, p->device))
      return lm_fail(LOOM_ERR_DEVICE, "%s: input %d ('%s') is on %s, the program runs on %s", op, i,
                     want->label, lm_device_str(t->node->device, a, sizeof a),
                     lm_device_str(p->device, b, sizeof b));
  }
  return LOOM_OK;
}

/* Output i: the buffer the run computed, or a copy (of a leaf, or of an
 * earlier output with the same value), on the program's device. */
static loom_status output_node(const loom_program *p, const lm_binding *bound, int i, void **bufs,
                               size_t *sizes, lm_node *const *earlier, lm_node **result) {
  const char *op = "loom_program_run";
  int pos = p->out_pos[i];
  const lm_node *n = p->nodes[pos];
  loom_shape shape = bound ? lm_program_shape_at(p, pos, bound->values) : n->shape;
  lm_node *out = lm_node_new(LM_BUFFER, 0, NULL, shape, n->dtype, p->device);
  *result = out;
  if (!out) return lm_fail(LOOM_ERR_OOM, "%s: out of memory for output %d", op, i);
  out->release_data = lm_data_free; /* whichever buffer it gets below */
  const void *from = p->kind[pos] == LM_SLOT_NODE ? NULL : bufs[pos];
  for (int j = 0; j < i && !from; j++)
    if (p->out_pos[j] == pos) from = earlier[j]->data;
  if (!from && bufs[pos]) { /* a target: its buffer is published */
    out->data = bufs[pos], out->bytes = sizes[pos];
    bufs[pos] = NULL, sizes[pos] = 0;
    return LOOM_OK;
  }
  size_t bytes = (size_t)lm_shape_numel(&shape) * loom_dtype_size(n->dtype);
  loom_status st = lm_data_alloc(op, p->device, bytes, &out->data);
  out->bytes = bytes;
  if (st == LOOM_OK && from) st = lm_data_copy(op, p->device, out->data, p->device, from, bytes);
  if (st != LOOM_OK) {
    lm_node_release(out);
    *result = NULL;
  }
  return st;
}

static loom_status bind_inputs(const loom_program *p, loom_tensor *const *ins, void **bufs) {
  lm_node **nodes = malloc(sizeof(lm_node *) * (size_t)(p->nin + 1));
  if (!nodes) return lm_fail(LOOM_ERR_OOM, "loom_program_run: out of memory");
  for (int i = 0; i < p->nin; i++) nodes[i] = ins[i]->node;
  loom_status st = p->nin ? lm_realize_nodes(nodes, p->nin) : LOOM_OK;
  free(nodes);
  if (st != LOOM_OK) return st;
  for (int pos = 0; pos < p->n; pos++) {
    if (p->kind[pos] == LM_SLOT_WEIGHT) bufs[pos] = p->nodes[pos]->data;
    if (p->kind[pos] == LM_SLOT_INPUT) bufs[pos] = ins[p->input_of[pos]]->node->data;
  }
  return LOOM_OK;
}

loom_status loom_program_run(const loom_program *p, loom_tensor *const *ins, loom_tensor **outs) {
  const char *op = "loom_program_run";
  if (!p || !outs || (p->nin > 0 && !ins))
    return lm_fail(LOOM_ERR_NULL, "%s: program, ins or outs is NULL", op);
  for (int i = 0; i < p->nout; i++) outs[i] = NULL;
  lm_binding *bound = NULL; /* the plan at other sizes of its symbols */
  loom_status st =
      p->symbolic ? lm_program_bind(p, ins, &bound) : lm_program_check_inputs(p, ins, NULL);
  if (st != LOOM_OK) return st;
  lm_plan *plan = bound ? bound->plan : p->plan;
  int nbufs = p->n + plan->ntemps;
  void **bufs = calloc((size_t)nbufs, sizeof *bufs);
  size_t *sizes = calloc((size_t)nbufs, sizeof *sizes);
  if (!bufs || !sizes) st = lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
  if (st == LOOM_OK) st = bind_inputs(p, ins, bufs);
  if (st == LOOM_OK)
    st = lm_exec_run(&(lm_exec){plan, bufs, sizes, p->keys, p->device, NULL, NULL});
  lm_node *results[64], **res = results;
  if (st == LOOM_OK && p->nout > 64 && !(res = calloc((size_t)p->nout, sizeof *res)))
    st = lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
  for (int i = 0; i < p->nout && st == LOOM_OK; i++) {
    st = output_node(p, bound, i, bufs, sizes, res, &res[i]);
    for (int j = 0; j < i && st != LOOM_OK; j++) lm_node_release(res[j]);
  }
  for (int i = 0; i < p->nout && st == LOOM_OK; i++) {
    outs[i] = lm_tensor_wrap(res[i]); /* releases res[i] when it fails */
    if ((st = loom_status_of(outs[i])) == LOOM_OK) continue;
    st = lm_fail(st, "%s: out of memory for output %d's handle", op, i);
    for (int j = 0; j <= i; j++) loom_free(outs[j]), outs[j] = NULL;
    for (int j = i + 1; j < p->nout; j++) lm_node_release(res[j]);
  }
  if (res != results) free(res);
  for (int pos = 0; bufs && sizes && pos < nbufs; pos++)
    if (pos >= p->n || p->kind[pos] == LM_SLOT_NODE) lm_data_free(p->device, bufs[pos], sizes[pos]);
  free(bufs);
  free(sizes);
  lm_program_unbind(p, bound);
  return st;
}

/* ------------------------------------------------------------ signature */

static bool in_range(const loom_program *p, int i, bool input) {
  return p && i >= 0 && i < (input ? p->nin : p->nout);
}

int loom_program_num_inputs(const loom_program *p) { return p ? p->nin : 0; }
int loom_program_num_outputs(const loom_program *p) { return p ? p->nout : 0; }

const char *loom_program_input_name(const loom_program *p, int i) {
  return in_range(p, i, true) ? p->in_nodes[i]->label : NULL;
}
loom_shape loom_program_input_shape(const loom_program *p, int i) {
  return in_range(p, i, true) ? p->in_nodes[i]->shape : LOOM_SHAPE0;
}
loom_dtype loom_program_input_dtype(const loom_program *p, int i) {
  return in_range(p, i, true) ? p->in_nodes[i]->dtype : LOOM_F32;
}

const char *loom_program_output_name(const loom_program *p, int i) {
  return in_range(p, i, false) ? p->out_names[i] : NULL;
}
loom_shape loom_program_output_shape(const loom_program *p, int i) {
  return in_range(p, i, false) ? p->nodes[p->out_pos[i]]->shape : LOOM_SHAPE0;
}
loom_dtype loom_program_output_dtype(const loom_program *p, int i) {
  return in_range(p, i, false) ? p->nodes[p->out_pos[i]]->dtype : LOOM_F32;
}
