/* Autograd: walks the recorded graph backwards from outputs, applying each
 * node's derivative rule (grad_rules.c). Gradients are lazy tensors like any
 * other: loom_backward only records; the next realization computes them,
 * fused with the forward pass and the optimizer's updates. The exception is a
 * copy between devices (LM_COPY): no graph spans two devices, so the
 * gradient reaching a copy is computed during the walk and copied back. */
#include <stdlib.h>

#include "frontend/autograd.h"
#include "frontend/frontend.h"

void loom_no_grad_begin(void) { lm_no_grad_push(); }
void loom_no_grad_end(void) { lm_no_grad_pop(); }
bool loom_grad_enabled(void) { return lm_grad_enabled(); }

loom_status loom_set_requires_grad(loom_tensor *t, bool requires_grad) {
  const char *name = "loom_set_requires_grad";
  loom_status st = lm_check_handle(name, t);
  if (st) return st;
  lm_node *n = t->node;
  if (!requires_grad) {
    t->requires_grad = false;
    if (n->grad_leaf == t) n->grad_leaf = NULL, n->requires_grad = false;
    return LOOM_OK;
  }
  if (!loom_dtype_is_float(n->dtype))
    return lm_fail(LOOM_ERR_DTYPE, "%s: only float tensors have gradients, got %s", name,
                   loom_dtype_name(n->dtype));
  if (n->requires_grad && n->grad_leaf != t && !lm_is_computed(n))
    return lm_fail(LOOM_ERR_VALUE,
                   "%s: the tensor has gradient history; only leaves can be "
                   "marked",
                   name);
  t->requires_grad = true;
  n->requires_grad = true;
  n->grad_leaf = t;
  return LOOM_OK;
}

bool loom_requires_grad(const loom_tensor *t) { return t && t->node && t->node->requires_grad; }

loom_tensor *loom_grad(const loom_tensor *t) {
  if (!t || !t->grad) return NULL;
  lm_node_retain(t->grad);
  loom_tensor *g = lm_tensor_wrap(t->grad);
  if (g && !g->status) { /* a reference of the handle's own, outside any scope */
    g->grad_of = (loom_tensor *)t;
    g->grad_of->refs++;
  }
  return g;
}

loom_status loom_set_grad(loom_tensor *t, const loom_tensor *grad) {
  const char *name = "loom_set_grad";
  loom_status st = lm_check_handle(name, t);
  if (st) return st;
  if (!grad) {
    loom_clear_grad(t);
    return LOOM_OK;
  }
  if ((st = lm_check_handle(name, grad))) return st;
  const lm_node *n = t->node, *g = grad->node;
  char a[128], b[128];
  if (!lm_shape_eq(&n->shape, &g->shape) || n->dtype != g->dtype ||
      n->device.type != g->device.type || n->device.index != g->device.index)
    return lm_fail(LOOM_ERR_SHAPE, "%s: a %s %s tensor cannot take a %s %s gradient", name,
                   loom_dtype_name(n->dtype), lm_shape_str(&n->shape, a, sizeof a),
                   loom_dtype_name(g->dtype), lm_shape_str(&g->shape, b, sizeof b));
  lm_node_retain(grad->node);
  lm_node_release(t->grad);
  t->grad = grad->node;
  return LOOM_OK;
}

loom_tensor *loom_detach(const loom_tensor *t) {
  loom_tensor *err;
  if ((err = lm_check("loom_detach", t))) return err;
  lm_no_grad_push(); /* the same values, recorded where no gradient flows */
  lm_node *n = lm_node_new(LM_RESHAPE, 1, (lm_node *const *)&t->node, t->node->shape,
                           t->node->dtype, t->node->device);
  lm_no_grad_pop();
  return lm_result(n);
}

void loom_clear_grad(loom_tensor *t) {
  if (!t) return;
  lm_node_release(t->grad);
  t->grad = NULL;
}

/* ------------------------------------------------------------ the walk */

/* The nodes gradients flow through and the gradient reaching each so far:
 * autograd's own storage, indexed by the position the walk gives each node in
 * its `pos` (post-order). A graph realized during the walk (a copy's gradient,
 * below) renumbers the nodes it reaches, so the walk numbers its nodes again
 * after one. */
typedef struct walk {
  lm_node **order; /* post-order: sources before consumers */
  lm_node **grad;  /* per walk position: the gradient so far (owned), or NULL */
  int n, cap;
} walk;

typedef struct frame {
  lm_node *node;
  int next;
} frame;

static bool push(walk *w, lm_node *n) {
  if (w->n == w->cap) {
    int ncap = w->cap ? 2 * w->cap : 64;
    lm_node **grown = realloc(w->order, sizeof(lm_node *) * (size_t)ncap);
    if (!grown) return false;
    w->order = grown, w->cap = ncap;
  }
  n->pos = w->n;
  w->order[w->n++] = n;
  return true;
}

/* n's position in the walk, or -1 when the walk did not reach it: its `pos`
 * says, unless something renumbered it since (then a search does). */
static int walk_pos(const walk *w, const lm_node *n) {
  if (n->pos >= 0 && n->pos < w->n && w->order[n->pos] == n) return n->pos;
  for (int i = 0; i < w->n; i++)
    if (w->order[i] == n) return i;
  return -1;
}

static void renumber(walk *w) {
  for (int i = 0; i < w->n; i++) w->order[i]->pos = i;
}

/* Gradients stop at leaves (handles marked with requires_grad). */
static bool descends(const lm_node *n) { return n->requires_grad && !n->grad_leaf; }

/* Everything gradients flow through from root, in post-order (iterative:
 * training graphs are deep). */
static bool collect(walk *w, lm_node *root, uint64_t epoch) {
  if (root->visit == epoch || !root->requires_grad) return true;
  int cap = 64, len = 0;
  frame *stack = malloc(sizeof(frame) * (size_t)cap);
  if (!stack) return false;
  root->visit = epoch;
  stack[len++] = (frame){root, 0};
  bool ok = true;
  while (len > 0 && ok) {
    frame *top = &stack[len - 1];
    lm_node *n = top->node;
    if (descends(n) && top->next < n->nsrc) {
      lm_node *s = n->src[top->next++];
      if (s->visit == epoch || !s->requires_grad) continue;
      s->visit = epoch;
      if (len == cap) {
        frame *grown = realloc(stack, sizeof(frame) * (size_t)(cap *= 2));
        if (!grown) {
          ok = false;
          break;
        }
        stack = grown;
      }
      stack[len++] = (frame){s, 0};
      continue;
    }
    ok = push(w, n);
    len--;
  }
  free(stack);
  return ok;
}

/* dst's gradient += g (g consumed). Gradients flow only through the walk's
 * nodes: one reaching another (a copy whose source stopped requiring
 * gradients) goes nowhere. */
static bool accumulate(walk *w, const lm_node *dst, lm_node *g) {
  int at = walk_pos(w, dst);
  if (at < 0) {
    lm_node_release(g);
    return true;
  }
  if (!w->grad[at]) {
    w->grad[at] = g;
    return true;
  }
  lm_node *sum = nb_binary(LM_ADD, w->grad[at], g);
  lm_node_release(g);
  if (!sum) return false;
  lm_node_release(w->grad[at]);
  w->grad[at] = sum;
  return true;
}

static void walk_free(walk *w) {
  for (int i = 0; w->grad && i < w->n; i++) lm_node_release(w->grad[i]);
  free(w->grad);
  free(w->order);
}

/* Seeds the outputs and applies the rules consumers-first; every node's
 * w->grad then holds its full gradient. */
static loom_status propagate(const char *name, lm_node *const *outs, lm_node *const *seeds,
                             int nout, walk *w) {
  uint64_t epoch = lm_walk_epoch();
  for (int i = 0; i < nout; i++)
    if (!collect(w, outs[i], epoch)) return lm_fail(LOOM_ERR_OOM, "%s: out of memory", name);
  w->grad = calloc((size_t)w->n + 1, sizeof *w->grad);
  if (!w->grad) return lm_fail(LOOM_ERR_OOM, "%s: out of memory", name);
  for (int i = 0; i < nout; i++) {
    if (!outs[i]->requires_grad) continue;
    lm_node_retain(seeds[i]);
    if (!accumulate(w, outs[i], seeds[i])) return lm_fail(LOOM_ERR_OOM, "%s: out of memory", name);
  }
  for (int i = w->n - 1; i >= 0; i--) {
    lm_node *n = w->order[i];
    if (!w->grad[i] || !descends(n)) continue;
    if (n->op == LM_COPY) {
      /* the copy's gradient, complete now (consumers come first), goes back
       * to the source's device: computed and copied here, as loom_to copies */
      lm_node *g;
      loom_status st = lm_copy_node(name, w->grad[i], n->src[0]->device, &g);
      renumber(w); /* the realization gave the nodes it reached their graph's positions */
      if (st != LOOM_OK) return st;
      if (!accumulate(w, n->src[0], g)) return lm_fail(LOOM_ERR_OOM, "%s: out of memory", name);
      continue;
    }
    if (n->op == LM_ATTENTION) { /* q, k and v's gradients from one backward */
      lm_node *g[3];
      if (!lm_attention_grads(n, w->grad[i], g))
        return lm_fail(LOOM_ERR_OOM, "%s: out of memory", name);
      for (int s = 0; s < 3; s++)
        if (g[s] && !accumulate(w, n->src[s], g[s])) {
          for (int t = s + 1; t < 3; t++) lm_node_release(g[t]);
          return lm_fail(LOOM_ERR_OOM, "%s: out of memory", name);
        }
      continue;
    }
    for (int s = 0; s < n->nsrc; s++) {
      bool oom;
      lm_node *g = lm_grad_rule(n, s, w->grad[i], &oom);
      if (oom) return lm_fail(LOOM_ERR_OOM, "%s: out of memory", name);
      if (g && !accumulate(w, n->src[s], g))
        return lm_fail(LOOM_ERR_OOM, "%s: out of memory", name);
    }
  }
  return LOOM_OK;
}

/* Adds each leaf's gradient from the walk to what it holds. Every new total
 * is built before any is stored, so running out of memory leaves every
 * gradient as it was: a backward happens whole or not at all. */
static loom_status accumulate_leaves(const char *name, walk *w) {
  lm_node **totals = calloc((size_t)w->n + 1, sizeof *totals);
  bool ok = totals != NULL;
  for (int i = 0; i < w->n && ok; i++) {
    lm_node *n = w->order[i];
    loom_tensor *leaf = n->grad_leaf;
    lm_node *grad = w->grad[i];
    if (!leaf || !grad) continue;
    totals[i] = leaf->grad ? nb_binary(LM_ADD, leaf->grad, grad) : (lm_node_retain(grad), grad);
    ok = totals[i] != NULL;
  }
  for (int i = 0; i < w->n && totals; i++) {
    if (!totals[i]) continue;
    loom_tensor *leaf = w->order[i]->grad_leaf;
    if (ok)
      lm_node_release(leaf->grad), leaf->grad = totals[i];
    else
      lm_node_release(totals[i]);
  }
  free(totals);
  return ok ? LOOM_OK : lm_fail(LOOM_ERR_OOM, "%s: out of memory", name);
}

static loom_status check_out(const char *name, const loom_tensor *t) {
  return lm_check_handle(name, t);
}

loom_status loom_backward(const loom_tensor *loss) {
  const char *name = "loom_backward";
  loom_status st = check_out(name, loss);
  if (st) return st;
  lm_node *out = loss->node;
  char sb[128];
  if (lm_shape_numel(&out->shape) != 1)
    return lm_fail(LOOM_ERR_SHAPE, "%s: the loss must have one element, shape %s has %lld", name,
                   lm_shape_str(&out->shape, sb, sizeof sb),
                   (long long)lm_shape_numel(&out->shape));
  if (!out->requires_grad)
    return lm_fail(LOOM_ERR_VALUE,
                   "%s: the loss does not depend on any tensor that requires "
                   "grad",
                   name);
  /* gradients of a plain backward are not differentiated again */
  lm_no_grad_push();
  lm_node *seed = nb_const(1.0, out->shape, out->dtype, out->device);
  walk w = {0};
  st =
      seed ? propagate(name, &out, &seed, 1, &w) : lm_fail(LOOM_ERR_OOM, "%s: out of memory", name);
  if (st == LOOM_OK) st = accumulate_leaves(name, &w);
  walk_free(&w);
  lm_node_release(seed);
  lm_no_grad_pop();
  return st;
}

loom_status loom_grad_of_seeded(loom_tensor *const *outs, loom_tensor *const *seeds, int nout,
                                loom_tensor *const *ins, int nin, loom_tensor **out_grads) {
  const char *name = "loom_grad_of";
  if (!outs || !ins || !out_grads || nout <= 0 || nin <= 0)
    return lm_fail(LOOM_ERR_NULL, "%s: needs outputs, inputs and a result array", name);
  for (int j = 0; j < nin; j++) out_grads[j] = NULL;
  loom_status st = LOOM_OK;
  for (int i = 0; i < nout && !st; i++) st = check_out(name, outs[i]);
  for (int i = 0; i < nin && !st; i++) st = check_out(name, ins[i]);
  for (int i = 0; seeds && i < nout && !st; i++) {
    st = check_out(name, seeds[i]);
    if (!st && !lm_shape_eq(&seeds[i]->node->shape, &outs[i]->node->shape))
      st = lm_fail(LOOM_ERR_SHAPE, "%s: seed %d's shape differs from its output's", name, i);
  }
  if (st) return st;
  lm_node **on = malloc(sizeof(lm_node *) * (size_t)nout * 2);
  if (!on) return lm_fail(LOOM_ERR_OOM, "%s: out of memory", name);
  lm_node **sn = on + nout;
  for (int i = 0; i < nout; i++) {
    on[i] = outs[i]->node;
    sn[i] = seeds ? (lm_node_retain(seeds[i]->node), seeds[i]->node)
                  : nb_const(1.0, on[i]->shape, on[i]->dtype, on[i]->device);
    if (!seeds && lm_shape_numel(&on[i]->shape) != 1)
      st = lm_fail(LOOM_ERR_SHAPE, "%s: output %d has more than one element: give seeds", name, i);
    if (!sn[i] && !st) st = lm_fail(LOOM_ERR_OOM, "%s: out of memory", name);
  }
  /* inputs are where the walk reads results, so they are not leaves here */
  loom_tensor **leaves = calloc((size_t)nin, sizeof *leaves);
  walk w = {0};
  if (!leaves && !st) st = lm_fail(LOOM_ERR_OOM, "%s: out of memory", name);
  for (int j = 0; j < nin && !st; j++)
    leaves[j] = ins[j]->node->grad_leaf, ins[j]->node->grad_leaf = NULL;
  if (!st) st = propagate(name, on, sn, nout, &w);
  for (int j = 0; j < nin && !st; j++) {
    int at = walk_pos(&w, ins[j]->node);
    lm_node *in = ins[j]->node, *g = at >= 0 ? w.grad[at] : NULL;
    if (g)
      lm_node_retain(g);
    else
      g = nb_const(0.0, in->shape, in->dtype, in->device);
    out_grads[j] = lm_result(g);
    if (!g) st = LOOM_ERR_OOM;
  }
  for (int j = 0; leaves && j < nin; j++)
    if (leaves[j]) ins[j]->node->grad_leaf = leaves[j];
  walk_free(&w);
  free(leaves);
  for (int i = 0; i < nout; i++) lm_node_release(sn[i]);
  free(on);
  return st;
}

loom_status loom_grad_of(loom_tensor *const *outs, int nout, loom_tensor *const *ins, int nin,
                         loom_tensor **out_grads) {
  return loom_grad_of_seeded(outs, NULL, nout, ins, nin, out_grads);
}
