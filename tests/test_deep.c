/* Deep graphs on a small stack: chains of a million ops realized fused (and
 * a long one unfused, and its gradient) on a thread with a 256 KiB stack, the stack a thread
 * library or a language runtime may give its workers; and a long chain as a
 * program saved, loaded, dumped and exported there. Lowering once recursed
 * per op and overflowed at about 100 ops on such a stack (16,000 on 8 MiB).
 *
 * LOOM_TEST_DEEP=n sets the unfused chain's length (tools/reliability.sh
 * runs a million; the suite 200,000, or less under ASan, whose frames and
 * checks make each op dearer). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "loom.h"

#if defined(__SANITIZE_ADDRESS__)
#define DEEP_FUSED 200000
#define DEEP_UNFUSED 20000
#else
#define DEEP_FUSED 1000000
#define DEEP_UNFUSED 200000
#endif
#define SMALL_STACK (256 << 10)

static const float x0[4] = {0.5f, 1, 2, 3};

/* cos applied n times to each of x0, in double (a fixed point near 0.739) */
static double chain_sum(int n) {
  double total = 0;
  for (int i = 0; i < 4; i++) {
    double v = x0[i];
    for (int k = 0; k < n; k++) v = cos((float)v);
    total += v;
  }
  return total;
}

typedef struct chain_job {
  int n;
  bool fuse;
} chain_job;

static void *realize_chain(void *arg) {
  const chain_job *j = arg;
  loom_set_fusion(j->fuse);
  LOOM_SCOPE {
    loom_tensor *x = loom_from_data(x0, LOOM_SHAPE(4), LOOM_F32, LOOM_CPU), *y = x;
    for (int i = 0; i < j->n; i++) y = loom_cos(y);
    double got = loom_item(loom_sum_all(y)), want = chain_sum(j->n > 64 ? 64 : j->n);
    CHECK_MSG(fabs(got - want) < 1e-4, "%d cos %s: %.7g, want %.7g (%s)", j->n,
              j->fuse ? "fused" : "unfused", got, want,
              loom_last_error() ? loom_last_error() : "no error");
  }
  loom_set_fusion(true);
  return NULL;
}

/* The gradient through the chain: autograd's walk and the backward graph. */
static void *backward_chain(void *arg) {
  const chain_job *j = arg;
  LOOM_SCOPE {
    loom_tensor *x = loom_from_data(x0, LOOM_SHAPE(4), LOOM_F32, LOOM_CPU), *y = x;
    loom_set_requires_grad(x, true);
    for (int i = 0; i < j->n; i++) y = loom_cos(y);
    CHECK_OK(loom_backward(loom_sum_all(y)));
    double g = loom_item(loom_sum_all(loom_grad(x)));
    CHECK_MSG(isfinite(g) && fabs(g) < 1e-6, "gradient through %d cos: %g", j->n, g);
  }
  return NULL;
}

static void *program_chain(void *arg) {
  const chain_job *j = arg;
  char dir[] = "/tmp/loom-deep-XXXXXX", path[64];
  if (!mkdtemp(dir)) return NULL;
  snprintf(path, sizeof path, "%s/chain.loom", dir);
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(4), LOOM_F32, LOOM_CPU), *y = x;
    for (int i = 0; i < j->n; i++) y = loom_cos(y);
    loom_program *p = loom_compile(&y, 1, &x, 1);
    CHECK_MSG(p != NULL, "compiling a %d-op chain: %s", j->n, loom_last_error());
    CHECK_OK(loom_program_save(p, path));
    loom_program *q = loom_program_load(path);
    CHECK_MSG(q != NULL, "loading a %d-op chain: %s", j->n, loom_last_error());
    FILE *null = fopen("/dev/null", "w");
    if (q && null) CHECK_OK(loom_program_dump(q, null));
    if (null) fclose(null);
    loom_tensor *in = loom_from_data(x0, LOOM_SHAPE(4), LOOM_F32, LOOM_CPU), *out = NULL;
    if (q) CHECK_OK(loom_program_run(q, &in, &out));
    if (out) CHECK_NEAR(loom_item(loom_sum_all(out)), chain_sum(64), 1e-4);
    if (q) CHECK_OK(loom_program_export(q, dir, "chain"));
    loom_free(out);
    loom_program_free(p);
    loom_program_free(q);
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK_EQ_INT(system(cmd), 0);
  return NULL;
}

static void on_small_stack(void *(*fn)(void *), chain_job j) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, SMALL_STACK);
  pthread_t t;
  CHECK_EQ_INT(pthread_create(&t, &attr, fn, &j), 0);
  pthread_join(t, NULL);
  pthread_attr_destroy(&attr);
}

int main(void) {
  const char *env = getenv("LOOM_TEST_DEEP");
  int unfused = env && atoi(env) > 0 ? atoi(env) : DEEP_UNFUSED;
  on_small_stack(realize_chain, (chain_job){100, true});
  on_small_stack(realize_chain, (chain_job){DEEP_FUSED, true});
  on_small_stack(realize_chain, (chain_job){unfused, false});
  on_small_stack(backward_chain, (chain_job){unfused, true});
  on_small_stack(program_chain, (chain_job){20000, true});
  return check_report();
}
