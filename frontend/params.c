/* Parameter collections: named tensors, trainable or not. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "frontend/params.h"

loom_params *loom_params_new(void) {
  loom_params *ps = calloc(1, sizeof *ps);
  if (!ps) lm_fail(LOOM_ERR_OOM, "loom_params_new: out of memory");
  return ps;
}

void loom_params_free(loom_params *ps) {
  if (!ps) return;
  for (int i = 0; i < ps->count; i++) {
    lm_tensor_release(ps->items[i].tensor);
    free(ps->items[i].name);
  }
  free(ps->items);
  free(ps);
}

static loom_status add(const char *op, loom_params *ps, const char *name, loom_tensor *t,
                       bool trainable) {
  if (!ps || !name || !t) return lm_fail(LOOM_ERR_NULL, "%s: NULL argument", op);
  loom_status st = lm_check_handle(op, t);
  if (st) return st;
  if (!*name || strcmp(name, "__metadata__") == 0) /* reserved by safetensors */
    return lm_fail(LOOM_ERR_VALUE, "%s: '%s' cannot name a parameter", op, name);
  if (lm_params_find(ps, name) >= 0)
    return lm_fail(LOOM_ERR_VALUE, "%s: a parameter named '%s' exists already", op, name);
  if (trainable && (st = loom_set_requires_grad(t, true))) return st;
  if (ps->count == ps->cap) {
    int ncap = ps->cap ? 2 * ps->cap : 16;
    lm_param *grown = realloc(ps->items, sizeof(lm_param) * (size_t)ncap);
    if (!grown) return lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
    ps->items = grown, ps->cap = ncap;
  }
  char *copy = strdup(name);
  if (!copy) return lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
  t->refs++; /* the collection's own reference, in no scope */
  ps->items[ps->count++] = (lm_param){copy, t, trainable};
  return LOOM_OK;
}

loom_status loom_params_add(loom_params *ps, const char *name, loom_tensor *t) {
  return add("loom_params_add", ps, name, t, true);
}
loom_status loom_params_add_buffer(loom_params *ps, const char *name, loom_tensor *t) {
  return add("loom_params_add_buffer", ps, name, t, false);
}

int loom_params_count(const loom_params *ps) { return ps ? ps->count : 0; }

static bool in_range(const char *op, const loom_params *ps, int i) {
  if (ps && i >= 0 && i < ps->count) return true;
  lm_fail(ps ? LOOM_ERR_VALUE : LOOM_ERR_NULL, "%s: index %d outside [0, %d)", op, i,
          ps ? ps->count : 0);
  return false;
}

loom_tensor *loom_params_at(const loom_params *ps, int i) {
  if (!in_range("loom_params_at", ps, i))
    return lm_error(ps ? LOOM_ERR_VALUE : LOOM_ERR_NULL, "loom_params_at: index %d out of range",
                    i);
  return lm_tensor_ref(ps->items[i].tensor);
}

const char *loom_params_name(const loom_params *ps, int i) {
  return in_range("loom_params_name", ps, i) ? ps->items[i].name : NULL;
}

bool loom_params_trainable(const loom_params *ps, int i) {
  return in_range("loom_params_trainable", ps, i) && ps->items[i].trainable;
}

int lm_params_find(const loom_params *ps, const char *name) {
  for (int i = 0; ps && name && i < ps->count; i++)
    if (strcmp(ps->items[i].name, name) == 0) return i;
  return -1;
}

loom_tensor *loom_params_get(const loom_params *ps, const char *name) {
  int i = lm_params_find(ps, name);
  return i < 0 ? NULL : lm_tensor_ref(ps->items[i].tensor);
}

void loom_zero_grad(loom_params *ps) {
  for (int i = 0; ps && i < ps->count; i++) loom_clear_grad(ps->items[i].tensor);
}

/* As torch.nn.utils.clip_grad_norm_: the 2-norm of all the gradients taken as
 * one vector, and each gradient scaled by min(1, max_norm / (norm + 1e-6)),
 * lazily (the next realization computes both). */
loom_tensor *loom_clip_grad_norm(loom_params *ps, double max_norm) {
  const char *name = "loom_clip_grad_norm";
  if (!ps) return lm_error(LOOM_ERR_NULL, "%s: parameter collection is NULL", name);
  if (!(max_norm > 0) || !isfinite(max_norm))
    return lm_error(LOOM_ERR_VALUE, "%s: max_norm must be positive and finite, got %g", name,
                    max_norm);
  loom_tensor *squares = NULL;
  bool any = false;
  LOOM_NO_GRAD {
    for (int i = 0; i < ps->count; i++) {
      loom_tensor *p = ps->items[i].tensor;
      if (!p->grad) continue;
      loom_tensor *g = loom_grad(p);
      loom_tensor *s = loom_cast(loom_sum_all(loom_square(g)), LOOM_F32);
      loom_tensor *total = squares ? loom_add(squares, s) : loom_retain(s);
      loom_free(squares), loom_free(s), loom_free(g);
      squares = total;
      any = true;
    }
  }
  if (!any) return loom_scalar(0, LOOM_F32, LOOM_CPU);
  loom_tensor *norm = loom_sqrt(squares);
  loom_free(squares);
  loom_tensor *coef = loom_minimum(
      loom_div(loom_scalar(max_norm, LOOM_F32, loom_device_of(norm)), loom_add_s(norm, 1e-6)),
      loom_scalar(1, LOOM_F32, loom_device_of(norm)));
  loom_status st = loom_status_of(coef);
  for (int i = 0; i < ps->count && st == LOOM_OK; i++) {
    loom_tensor *p = ps->items[i].tensor;
    if (!p->grad) continue;
    loom_tensor *g = loom_grad(p);
    loom_tensor *c = loom_cast(loom_to(coef, loom_device_of(g)), loom_dtype_of(g));
    loom_tensor *scaled = loom_mul(g, c);
    st = loom_set_grad(p, scaled);
    loom_free(scaled), loom_free(c), loom_free(g);
  }
  loom_free(coef);
  if (st != LOOM_OK) {
    loom_free(norm);
    return lm_error_recorded(st);
  }
  return norm;
}
