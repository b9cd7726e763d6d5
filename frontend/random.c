/* Counter-based random numbers: keys and draws (Philox 4x32-10, generated
 * inside kernels so they fuse), and torch.multinomial's draws from them. */
#include <pthread.h>

#include "base/philox.h"
#include "frontend/frontend.h"

loom_key loom_key_new(uint64_t seed) {
  return (loom_key){{(uint32_t)seed, (uint32_t)(seed >> 32)}};
}

/* Folding uses the counter block's last word 1; draws use 0, so no fold ever
 * equals a draw. */
loom_key loom_key_fold(loom_key key, uint64_t data) {
  uint32_t ctr[4] = {(uint32_t)data, (uint32_t)(data >> 32), 0, 1}, out[4];
  lm_philox4x32(ctr, key.k, out);
  return (loom_key){{out[0], out[1]}};
}

void loom_key_split(loom_key key, loom_key *out, int n) {
  if (!out) return;
  for (int i = 0; i < n; i++) out[i] = loom_key_fold(key, (uint64_t)i);
}

/* The global key of loom_rand/loom_randn, as the design names it. */
static pthread_mutex_t global_lock = PTHREAD_MUTEX_INITIALIZER;
static loom_key global_key = {{0, 0}};
static uint64_t global_counter;

void loom_manual_seed(uint64_t seed) {
  pthread_mutex_lock(&global_lock);
  global_key = loom_key_new(seed);
  global_counter = 0;
  pthread_mutex_unlock(&global_lock);
}

loom_key loom_next_key(void) {
  pthread_mutex_lock(&global_lock);
  loom_key k = loom_key_fold(global_key, global_counter++);
  pthread_mutex_unlock(&global_lock);
  return k;
}

static loom_tensor *draw(const char *name, loom_key key, lm_rand_kind kind, double p,
                         loom_shape shape, loom_dtype dtype, loom_device device) {
  loom_tensor *err;
  if ((err = lm_check_dtype(name, dtype)) || (err = lm_check_shape(name, &shape, dtype)) ||
      (err = lm_check_device(name, device)))
    return err;
  if (kind != LM_RAND_BERNOULLI && !loom_dtype_is_float(dtype))
    return lm_error(LOOM_ERR_DTYPE, "%s: needs a float dtype (f32, f64, bf16, f16), got %s", name,
                    loom_dtype_name(dtype));
  if (kind == LM_RAND_BERNOULLI && !(p >= 0 && p <= 1))
    return lm_error(LOOM_ERR_VALUE, "%s: probability %g is outside [0, 1]", name, p);
  lm_node *n = lm_node_new(LM_RAND, 0, NULL, shape, dtype, device);
  if (n) {
    n->arg.rand.key = key;
    n->arg.rand.kind = kind;
    n->arg.rand.p = p;
  }
  return lm_result(nb_user_sized(n, name, nb_all_dims(&shape)));
}

loom_tensor *loom_rand_key(loom_key key, loom_shape shape, loom_dtype dtype, loom_device device) {
  return draw("loom_rand_key", key, LM_RAND_UNIFORM, 0, shape, dtype, device);
}
loom_tensor *loom_randn_key(loom_key key, loom_shape shape, loom_dtype dtype, loom_device device) {
  return draw("loom_randn_key", key, LM_RAND_NORMAL, 0, shape, dtype, device);
}
loom_tensor *loom_bernoulli_key(loom_key key, double p, loom_shape shape, loom_device device) {
  return draw("loom_bernoulli_key", key, LM_RAND_BERNOULLI, p, shape, LOOM_BOOL, device);
}
loom_tensor *loom_rand(loom_shape shape, loom_dtype dtype, loom_device device) {
  return draw("loom_rand", loom_next_key(), LM_RAND_UNIFORM, 0, shape, dtype, device);
}
loom_tensor *loom_randn(loom_shape shape, loom_dtype dtype, loom_device device) {
  return draw("loom_randn", loom_next_key(), LM_RAND_NORMAL, 0, shape, dtype, device);
}

/* ------------------------------------------------------------ multinomial */

/* torch.multinomial by the Gumbel-max trick: argmax(log p + g), g Gumbel
 * noise drawn from key, is a draw from p / sum(p); n such draws are n
 * independent draws, and the top n of one set of noisy scores are n draws
 * without replacement (Gumbel-top-k). */
LM_PUBLIC(loom_tensor *, loom_multinomial_key,
          (loom_key key, const loom_tensor *probs, int64_t n, bool replacement),
          (key, probs, n, replacement)) {
  const char *op = "loom_multinomial_key";
  loom_tensor *err;
  if ((err = lm_check(op, probs))) return err;
  const loom_shape *s = &probs->node->shape;
  if (s->ndim < 1 || s->ndim > 2 || !loom_dtype_is_float(probs->node->dtype)) {
    char sp[128];
    return lm_error(LOOM_ERR_SHAPE, "%s: needs float probabilities [C] or [N, C], got %s %s", op,
                    loom_dtype_name(probs->node->dtype), lm_shape_str(s, sp, sizeof sp));
  }
  int64_t classes = s->dim[s->ndim - 1];
  if (n <= 0 || (!replacement && n > classes))
    return lm_error(LOOM_ERR_VALUE, "%s: %lld draws %s from %lld categories", op, (long long)n,
                    replacement ? "with replacement" : "without replacement", (long long)classes);
  int token = lm_composite_begin();
  /* torch's invalid distributions (a weight < 0, inf or NaN; a row summing to
   * 0) refused, not drawn from: log of a negative weight is NaN, which
   * argmax takes for the largest */
  loom_tensor *weights = lm_checked_weights(op, probs);
  loom_tensor *logp = loom_log(loom_cast(weights, LOOM_F64)), *draws;
  if (replacement) { /* [.., n, C]: n noisy copies */
    loom_shape wide = *s;
    wide.ndim = s->ndim + 1;
    wide.dim[wide.ndim - 1] = classes, wide.dim[wide.ndim - 2] = n;
    loom_tensor *u = loom_rand_key(key, wide, LOOM_F64, probs->node->device);
    if (loom_status_of(u) == LOOM_OK) /* the draws, counted by the user */
      nb_user_sized(u->node, op, (uint8_t)(1u << (wide.ndim - 2)));
    loom_tensor *gumbel = loom_neg(loom_log(loom_neg(loom_log(u))));
    draws = loom_argmax(loom_add(loom_unsqueeze(logp, -2), gumbel), -1, false);
  } else {
    loom_tensor *u = loom_rand_key(key, *s, LOOM_F64, probs->node->device);
    loom_tensor *gumbel = loom_neg(loom_log(loom_neg(loom_log(u))));
    loom_status st = loom_topk(loom_add(logp, gumbel), n, -1, true, NULL, &draws);
    if (st) return lm_composite_end(token, lm_error_recorded(st));
  }
  return lm_composite_end(token, draws);
}
