/* Node lifetime: creation, reference counting, turning into a computed leaf. */
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

/* Depth of open no-grad regions on this thread (LOOM_NO_GRAD). */
static _Thread_local int grad_mode_depth;

void lm_no_grad_push(void) { grad_mode_depth++; }
void lm_no_grad_pop(void) {
  if (grad_mode_depth > 0) grad_mode_depth--;
}
bool lm_grad_enabled(void) { return grad_mode_depth == 0; }

/* The outermost public op running on this thread (lm_recording_op_enter). */
static _Thread_local const char *recording_op;

const char *lm_recording_op_enter(const char *op) {
  const char *previous = recording_op;
  if (!previous) recording_op = op;
  return previous;
}
void lm_recording_op_leave(const char *previous) { recording_op = previous; }
const char *lm_recording_op(void) { return recording_op; }

lm_node *lm_node_new(lm_op op, int nsrc, lm_node *const *src, loom_shape shape, loom_dtype dtype,
                     loom_device device) {
  lm_node *n = calloc(1, sizeof *n);
  if (!n) return NULL;
  n->src = n->src_inline;
  if (nsrc > 3) {
    n->src = malloc(sizeof(lm_node *) * (size_t)nsrc);
    if (!n->src) {
      free(n);
      return NULL;
    }
  }
  n->op = op;
  n->refs = 1;
  n->nsrc = nsrc;
  for (int i = 0; i < nsrc; i++) {
    n->src[i] = src[i];
    lm_node_retain(src[i]);
  }
  for (int i = 0; i < nsrc && grad_mode_depth == 0; i++) n->requires_grad |= src[i]->requires_grad;
  n->shape = shape;
  n->dtype = dtype;
  n->device = device;
  n->made_by = recording_op;
  n->pos = -1;
  return n;
}

void lm_node_retain(lm_node *n) {
  if (n) n->refs++;
}

/* Releases n's sources; those whose last reference this was go on *dead, a
 * list linked through the dying nodes themselves: releasing never allocates,
 * so it cannot fail or leak when memory runs out. */
static void drop_sources(lm_node *n, lm_node **dead) {
  for (int i = 0; i < n->nsrc; i++) {
    lm_node *s = n->src[i];
    if (--s->refs > 0) continue;
    s->dead_next = *dead;
    *dead = s;
  }
  if (n->src != n->src_inline) free(n->src);
  n->src = n->src_inline;
  n->nsrc = 0;
}

static void destroy(lm_node *n, lm_node **dead) {
  drop_sources(n, dead);
  if (n->data) n->release_data(n->device, n->data, n->bytes);
  free(n->label);
  free(n);
}

/* Frees every node on the list (and the sources they release in turn). */
static void destroy_all(lm_node *dead) {
  while (dead) {
    lm_node *n = dead;
    dead = n->dead_next;
    destroy(n, &dead);
  }
}

/* Iterative, so that releasing a long chain (a training loop's graph) cannot
 * overflow the C stack. */
void lm_node_release(lm_node *n) {
  if (!n || --n->refs > 0) return;
  n->dead_next = NULL;
  destroy_all(n);
}

void lm_node_set_buffer(lm_node *n, void *data, size_t bytes, lm_data_release release) {
  if (n->requires_grad && !n->grad_leaf && n->nsrc > 0) {
    /* gradients may still flow through it: keep the history */
    if (n->data) n->release_data(n->device, n->data, n->bytes);
    n->data = data;
    n->bytes = bytes;
    n->release_data = release;
    return;
  }
  lm_node *dead = NULL;
  drop_sources(n, &dead);
  destroy_all(dead);
  if (n->data) n->release_data(n->device, n->data, n->bytes);
  n->op = LM_BUFFER;
  n->data = data;
  n->bytes = bytes;
  n->release_data = release;
  memset(&n->arg, 0, sizeof n->arg);
}
