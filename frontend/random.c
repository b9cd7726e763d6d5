/* Counter-based random numbers: keys and draws (Philox 4x32-10, generated
 * inside kernels so they fuse). */
#include <pthread.h>

#include "frontend/frontend.h"
#include "runtime/philox.h"

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
