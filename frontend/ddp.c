/* Data-parallel training (loom_ddp): parameters broadcast from rank 0 once,
 * then each optimizer step's gradients all-reduced in buckets, as nodes of
 * the step's graph (frontend/optim.c asks lm_ddp_grads for them). A bucket is
 * one ALL_REDUCE node over its gradients: the collective step copies their
 * buffers into its output (a cat kernel of many sources ran 10x slower). */
#include <stdlib.h>

#include "frontend/optim.h"
#include "frontend/params.h"
#include "runtime/dist.h"

loom_status loom_ddp(loom_params *ps, loom_ddp_opts opts) {
  const char *op = "loom_ddp";
  if (!ps) return lm_fail(LOOM_ERR_NULL, "%s: the parameter collection is NULL", op);
  if (opts.bucket_bytes < 0 || opts.first_bucket_bytes < 0)
    return lm_fail(LOOM_ERR_VALUE, "%s: bucket_bytes %lld and first_bucket_bytes %lld must be >= 0",
                   op, (long long)opts.bucket_bytes, (long long)opts.first_bucket_bytes);
  /* include/loom.h's options rule: zero fields take DDP's defaults; a first
   * bucket left zero is never larger than the others */
  if (opts.bucket_bytes == 0) opts.bucket_bytes = LOOM_DDP_DEFAULTS.bucket_bytes;
  if (opts.first_bucket_bytes == 0)
    opts.first_bucket_bytes = LOOM_DDP_DEFAULTS.first_bucket_bytes < opts.bucket_bytes
                                  ? LOOM_DDP_DEFAULTS.first_bucket_bytes
                                  : opts.bucket_bytes;
  int world;
  loom_status st = lm_dist_world(op, &world);
  int trainable = 0;
  for (int i = 0; i < ps->count && st == LOOM_OK; i++) {
    loom_tensor *t = ps->items[i].tensor;
    if (!ps->items[i].trainable) continue;
    trainable++;
    st = lm_check_handle(op, t);
  }
  if (st == LOOM_OK && trainable == 0)
    st = lm_fail(LOOM_ERR_VALUE, "%s: the collection has no trainable tensors", op);
  /* every rank starts from rank 0's values */
  for (int i = 0; i < ps->count && st == LOOM_OK; i++) {
    loom_tensor *t = ps->items[i].tensor;
    if (!ps->items[i].trainable) continue;
    loom_scope_begin();
    loom_tensor *root = loom_broadcast(t, 0);
    st = loom_status_of(root);
    if (st == LOOM_OK) st = loom_assign(t, root);
    if (st == LOOM_OK) st = loom_realize(t);
    loom_status end = loom_scope_end();
    if (st == LOOM_OK) st = end;
  }
  for (int i = 0; i < ps->count && st == LOOM_OK; i++)
    if (ps->items[i].trainable) {
      ps->items[i].tensor->ddp_bucket_bytes = opts.bucket_bytes;
      ps->items[i].tensor->ddp_first_bucket_bytes = opts.first_bucket_bytes;
    }
  return st;
}

/* The gradients of slots [first, last] joined and all-reduced (mean) by one
 * collective (ALL_REDUCE with several sources: their buffers are copied
 * into its output, reduced in place), each one's part back in its shape
 * into grads[]. */
static bool reduce_bucket(lm_optim_slot *const *active, int first, int last, int world,
                          lm_node **grads) {
  int k = last - first + 1;
  lm_node *src[LM_CAT_MAX_SOURCES];
  int64_t total = 0;
  for (int i = 0; i < k; i++) {
    src[i] = active[first + i]->param->grad;
    total += lm_shape_numel(&src[i]->shape);
  }
  lm_node *mean =
      lm_node_new(LM_ALL_REDUCE, k, src, LOOM_SHAPE(total), src[0]->dtype, src[0]->device);
  if (!mean) return false;
  mean->arg.coll.reduce = LOOM_REDUCE_MEAN, mean->arg.coll.world = world;
  int64_t at = 0, one = 1;
  bool ok = true;
  for (int i = 0; i < k && ok; i++) {
    int64_t n = lm_shape_numel(&src[i]->shape);
    lm_node *part = nb_slice(mean, LOOM_SHAPE(n), &at, &one);
    grads[first + i] = part ? nb_reshape(part, src[i]->shape) : NULL;
    lm_node_release(part);
    ok = grads[first + i] != NULL;
    at += n;
  }
  lm_node_release(mean);
  return ok;
}

loom_status lm_ddp_grads(lm_optim_slot *const *active, int n, lm_node **grads) {
  int world = 1;
  bool any = false;
  for (int i = 0; i < n; i++) any |= active[i]->param->ddp_bucket_bytes > 0;
  loom_status st = any ? lm_dist_world("loom_optim_step", &world) : LOOM_OK;
  /* from the last parameter back: the backward pass makes those first (and
     the first bucket may be smaller, to start sooner) */
  bool first_bucket = true;
  for (int last = n - 1; last >= 0 && st == LOOM_OK;) {
    const loom_tensor *p = active[last]->param;
    if (p->ddp_bucket_bytes <= 0) {
      lm_node_retain(p->grad);
      grads[last--] = p->grad;
      continue;
    }
    const lm_node *g = p->grad;
    int64_t bytes = lm_shape_numel(&g->shape) * (int64_t)loom_dtype_size(g->dtype);
    int64_t cap = first_bucket ? p->ddp_first_bucket_bytes : p->ddp_bucket_bytes;
    int first = last;
    while (first > 0 && last - first + 1 < LM_CAT_MAX_SOURCES) {
      const loom_tensor *q = active[first - 1]->param;
      const lm_node *h = q->grad;
      int64_t more = lm_shape_numel(&h->shape) * (int64_t)loom_dtype_size(h->dtype);
      if (q->ddp_bucket_bytes <= 0 || h->dtype != g->dtype || bytes + more > cap) break;
      bytes += more;
      first--;
    }
    if (!reduce_bucket(active, first, last, world, grads))
      st = lm_fail(LOOM_ERR_OOM, "loom_optim_step: out of memory");
    last = first - 1;
    first_bucket = false;
  }
  return st;
}
