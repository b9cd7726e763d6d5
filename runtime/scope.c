/* Scopes: every reference made inside is released at the end, except those
 * moved out with loom_keep. A scope is a graph lifetime: releasing the
 * references frees the nodes nothing else refers to. */
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

typedef struct tensor_list {
  loom_tensor **items;
  int len, cap;
} tensor_list;

typedef struct scope {
  tensor_list owned; /* one entry per reference the scope holds */
  tensor_list kept;  /* moved out of this scope: realized at its end */
} scope;

/* The thread-local scope stack, as the design names it. Its first levels
 * live in thread-local storage, so opening a scope allocates nothing until
 * scopes nest deeper than INLINE_SCOPES; then `heap` holds the whole stack.
 * `phantoms` counts scopes that could not be opened there (out of memory):
 * their references go to the (real) scope below, and their ends pop nothing,
 * so a failed begin never makes the matching end close the enclosing scope. */
#define INLINE_SCOPES 8
static _Thread_local scope inline_scopes[INLINE_SCOPES];
static _Thread_local scope *heap;
static _Thread_local int depth, heap_cap, phantoms;

static scope *scopes(void) { return heap ? heap : inline_scopes; }

/* Room for `extra` more items, so that a later push cannot fail. */
static bool list_reserve(tensor_list *l, int extra) {
  if (l->len + extra <= l->cap) return true;
  int ncap = l->cap ? l->cap * 2 : 32;
  while (ncap < l->len + extra) ncap *= 2;
  loom_tensor **grown = realloc(l->items, sizeof(loom_tensor *) * (size_t)ncap);
  if (!grown) return false;
  l->items = grown, l->cap = ncap;
  return true;
}

static bool list_push(tensor_list *l, loom_tensor *t) {
  if (!list_reserve(l, 1)) return false;
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

int loom_scope_depth(void) { return depth + phantoms; }

static bool push_scope(void) {
  int cap = heap ? heap_cap : INLINE_SCOPES;
  if (depth == cap) {
    scope *grown = realloc(heap, sizeof(scope) * (size_t)(2 * cap));
    if (!grown) return false;
    if (!heap) memcpy(grown, inline_scopes, sizeof inline_scopes);
    heap = grown, heap_cap = 2 * cap;
  }
  scopes()[depth++] = (scope){{0}, {0}};
  return true;
}

void loom_scope_begin(void) {
  if (phantoms == 0 && push_scope()) return;
  phantoms++;
  lm_fail(LOOM_ERR_OOM, "loom_scope_begin: out of memory at depth %d", depth + phantoms);
}

bool lm_scope_track(loom_tensor *t) {
  if (depth == 0 || !t) return true;
  return list_push(&scopes()[depth - 1].owned, t);
}

bool lm_scope_untrack(loom_tensor *t) {
  for (int d = depth - 1; d >= 0; d--)
    if (list_remove(&scopes()[d].owned, t)) return true;
  return false;
}

loom_tensor *loom_keep(loom_tensor *t) {
  if (!t || lm_is_static_error(t)) return t;
  if (depth == 0) {
    lm_fail(LOOM_ERR_SCOPE, "loom_keep: called outside any scope");
    return t;
  }
  scope *s = &scopes()[depth - 1];
  /* Both lists get room first: a keep either happens whole or not at all
   * (then t stays the scope's, released at its end, and the caller gets an
   * error tensor that needs no release). */
  if ((depth > 1 && !list_reserve(&scopes()[depth - 2].owned, 1)) || !list_reserve(&s->kept, 1))
    return lm_oom_tensor("loom_keep: out of memory");
  if (!list_remove(&s->owned, t)) {
    lm_fail(LOOM_ERR_SCOPE, "loom_keep: the tensor holds no reference in the current scope");
    return t;
  }
  if (depth > 1) list_push(&scopes()[depth - 2].owned, t);
  /* the kept list holds its own reference: the tensor may be freed before
   * this scope ends */
  list_push(&s->kept, t);
  t->refs++;
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
  if (push_scope()) return depth;
  lm_fail(LOOM_ERR_OOM, "out of memory opening a composite op's scope");
  return -1;
}

/* Releases a popped scope's references (each registered once per reference,
 * so released without untracking) and its kept list. */
static void release_scope(scope *s) {
  for (int i = 0; i < s->owned.len; i++) lm_tensor_release(s->owned.items[i]);
  for (int i = 0; i < s->kept.len; i++) lm_tensor_release(s->kept.items[i]);
  free(s->owned.items);
  free(s->kept.items);
  if (depth == 0) {
    free(heap);
    heap = NULL;
    heap_cap = 0;
  }
}

loom_tensor *lm_composite_end(int token, loom_tensor *result) {
  if (token < 0 || token != depth) return result;
  /* Room for the result in the enclosing scope first; without it the result
   * is released with everything else and the caller gets an OOM error. */
  bool room = depth < 2 || list_reserve(&scopes()[depth - 2].owned, 1);
  scope s = scopes()[--depth];
  if (room && result && list_remove(&s.owned, result) && depth > 0)
    list_push(&scopes()[depth - 1].owned, result);
  release_scope(&s);
  return room ? result : lm_oom_tensor("out of memory ending a composite op's scope");
}

loom_status loom_scope_end(void) {
  if (phantoms > 0) {
    phantoms--;
    return lm_fail(LOOM_ERR_OOM, "loom_scope_end: this scope could not be opened (out of memory)");
  }
  if (depth == 0) return lm_fail(LOOM_ERR_SCOPE, "loom_scope_end: no scope is open");
  scope s = scopes()[--depth];
  /* Kept tensors are alive in the enclosing scope (or with the caller). */
  loom_status st = realize_kept(&s.kept);
  release_scope(&s);
  return st;
}
