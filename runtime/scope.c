/* Scopes: every reference made inside is released at the end, except those
 * moved out with loom_keep. A scope is a graph lifetime: releasing the
 * references frees the nodes nothing else refers to. */
#include <stdlib.h>

#include "runtime/runtime.h"

typedef struct tensor_list {
  loom_tensor **items;
  int len, cap;
} tensor_list;

typedef struct scope {
  tensor_list owned; /* one entry per reference the scope holds */
  tensor_list kept;  /* moved out of this scope: realized at its end */
} scope;

/* The thread-local scope stack, as the design names it. */
static _Thread_local scope *stack;
static _Thread_local int depth, stack_cap;

static bool list_push(tensor_list *l, loom_tensor *t) {
  if (l->len == l->cap) {
    int ncap = l->cap ? l->cap * 2 : 32;
    loom_tensor **grown = realloc(l->items, sizeof(loom_tensor *) * (size_t)ncap);
    if (!grown) return false;
    l->items = grown, l->cap = ncap;
  }
  l->items[l->len++] = t;
  return true;
}

static bool list_remove(tensor_list *l, loom_tensor *t) {
  for (int i = l->len - 1; i >= 0; i--) {
    if (l->items[i] != t) continue;
    l->items[i] = l->items[--l->len];
    return true;
  }
  return false;
}

int loom_scope_depth(void) { return depth; }

void loom_scope_begin(void) {
  if (depth == stack_cap) {
    int ncap = stack_cap ? stack_cap * 2 : 8;
    scope *grown = realloc(stack, sizeof(scope) * (size_t)ncap);
    if (!grown) {
      lm_fail(LOOM_ERR_OOM, "loom_scope_begin: out of memory at depth %d", depth);
      return;
    }
    stack = grown, stack_cap = ncap;
  }
  stack[depth++] = (scope){{0}, {0}};
}

void lm_scope_track(loom_tensor *t) {
  if (depth == 0 || !t) return;
  /* If the list cannot grow, the reference stays with the caller rather than
   * being lost; it leaks only under memory exhaustion. */
  list_push(&stack[depth - 1].owned, t);
}

bool lm_scope_untrack(loom_tensor *t) {
  for (int d = depth - 1; d >= 0; d--)
    if (list_remove(&stack[d].owned, t)) return true;
  return false;
}

loom_tensor *loom_keep(loom_tensor *t) {
  if (!t) return t;
  if (depth == 0) {
    lm_fail(LOOM_ERR_SCOPE, "loom_keep: called outside any scope");
    return t;
  }
  scope *s = &stack[depth - 1];
  if (!list_remove(&s->owned, t)) {
    lm_fail(LOOM_ERR_SCOPE, "loom_keep: the tensor holds no reference in the current scope");
    return t;
  }
  if (depth > 1) list_push(&stack[depth - 2].owned, t);
  /* the kept list holds its own reference: the tensor may be freed before
   * this scope ends */
  if (!lm_is_static_error(t) && list_push(&s->kept, t)) t->refs++;
  return t;
}

static loom_status realize_kept(tensor_list *kept) {
  lm_node **nodes = malloc(sizeof(lm_node *) * (size_t)(kept->len ? kept->len : 1));
  if (!nodes) return lm_fail(LOOM_ERR_OOM, "loom_scope_end: out of memory");
  int n = 0;
  loom_status kept_error = LOOM_OK;
  for (int i = 0; i < kept->len; i++) {
    loom_tensor *t = kept->items[i];
    if (t->node)
      nodes[n++] = t->node;
    else if (kept_error == LOOM_OK)
      kept_error = t->status; /* a kept error is the scope's */
  }
  loom_status st = lm_realize_nodes(nodes, n); /* pending assignments too */
  if (st == LOOM_OK) st = kept_error;
  free(nodes);
  return st;
}

/* The token is the depth the composite's scope got (-1 when it could not be
 * opened), so a failed begin never closes the caller's scope. */
int lm_composite_begin(void) {
  int before = depth;
  loom_scope_begin();
  return depth == before + 1 ? depth : -1;
}

/* Releases a popped scope's references (each registered once per reference,
 * so released without untracking) and its kept list. */
static void release_scope(scope *s) {
  for (int i = 0; i < s->owned.len; i++) lm_tensor_release(s->owned.items[i]);
  for (int i = 0; i < s->kept.len; i++) lm_tensor_release(s->kept.items[i]);
  free(s->owned.items);
  free(s->kept.items);
  if (depth == 0) {
    free(stack);
    stack = NULL;
    stack_cap = 0;
  }
}

loom_tensor *lm_composite_end(int token, loom_tensor *result) {
  if (token < 0 || token != depth) return result;
  scope s = stack[--depth];
  if (result && list_remove(&s.owned, result) && depth > 0)
    list_push(&stack[depth - 1].owned, result);
  release_scope(&s);
  return result;
}

loom_status loom_scope_end(void) {
  if (depth == 0) return lm_fail(LOOM_ERR_SCOPE, "loom_scope_end: no scope is open");
  scope s = stack[--depth];
  /* Kept tensors are alive in the enclosing scope (or with the caller). */
  loom_status st = realize_kept(&s.kept);
  release_scope(&s);
  return st;
}
