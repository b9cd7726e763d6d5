/* LOOM_PROFILE=1: every program run on the CPU prints how long each of its
 * steps took, to stderr, after the run (the kernels' listings are under
 * LOOM_DUMP). For finding the kernel worth improving, not for benchmarks:
 * `loom bench` measures those. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/exec.h"
#include "runtime/gemm.h"
#include "runtime/runtime.h"
#include "runtime/step_kinds.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool enabled; /* written once under `once` */

static void read_environment(void) { enabled = lm_env_flag("LOOM_PROFILE"); }

bool lm_profile_enabled(void) {
  pthread_once(&once, read_environment);
  return enabled;
}

double lm_profile_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

void lm_gemm_write_profile(FILE *f, const lm_step *s) {
  const lm_gemm *g = &s->gemm;
  fprintf(f, "gemm M %lld N %lld K %lld batch %lld%s%s%s\n", (long long)g->M, (long long)g->N,
          (long long)g->K, (long long)lm_gemm_batches(g), g->a_trans ? " A^T" : "",
          g->b_trans ? " B^T" : "",
          s->b_producer < 0           ? ""
          : lm_gemm_windows_usable(g) ? ", B read from the image's windows"
                                      : ", B made in blocks inside");
}

void lm_collective_write_profile(FILE *f, const lm_step *s) {
  fprintf(f, "%s of %lld %s values over %d ranks\n", lm_op_name(s->coll.op),
          (long long)s->coll.count, loom_dtype_name(s->coll.dtype), s->coll.world);
}

void lm_attention_write_profile(FILE *f, const lm_step *s) {
  const lm_attention *a = &s->attn;
  int64_t batch = 1;
  for (int d = 0; d < a->nbatch; d++) batch *= a->batch[d];
  fprintf(f, "attention%s Tq %lld Tk %lld D %lld Dv %lld batch %lld%s\n",
          a->backward ? "_grad" : "", (long long)a->tq, (long long)a->tk, (long long)a->d,
          (long long)a->dv, (long long)batch, a->causal ? ", causal" : "");
}

void lm_check_write_profile(FILE *f, const lm_step *s) {
  fprintf(f, "check: %s's %s rule over %lld rows of %lld %s\n", s->check.op,
          lm_check_rule_name(s->check.rule), (long long)s->check.rows, (long long)s->check.cols,
          loom_dtype_name(s->check.dtype));
}

void lm_sort_write_profile(FILE *f, const lm_step *s) {
  fprintf(f, "sort: the first %lld of %lld rows of %lld %s%s\n", (long long)s->sort.k,
          (long long)s->sort.rows, (long long)s->sort.n, loom_dtype_name(s->sort.dtype),
          s->sort.descending ? ", descending" : "");
}

void lm_kernel_write_profile(FILE *f, const lm_step *s) {
  const lk_kernel *k = &s->kernel;
  fprintf(f, "kernel %lld points, dom [", (long long)s->outer);
  for (int d = 0; d < k->ndim; d++) fprintf(f, "%s%lld", d ? "," : "", (long long)k->dom[d]);
  fprintf(f, "] outer %d%s%s%s%s\n", k->nouter, k->reduce != LK_RED_NONE ? ", reduction" : "",
          k->nstats ? ", row statistics" : "", s->gemm_partner >= 0 ? ", with its GEMM" : "",
          s->sizes ? ", shape-generic" : "");
}

static void print_step(const lm_step *s, int i, double ms) {
  fprintf(stderr, "  step %3d  %8.3f ms  ", i, ms);
  lm_step_kind_runtimes[s->kind]->write_profile(stderr, s);
}

void lm_profile_report(const lm_plan *p, const double *ms) {
  double total = 0;
  for (int i = 0; i < p->nsteps; i++) total += ms[i];
  fprintf(stderr, "loom: profile: %d steps, %.3f ms\n", p->nsteps, total);
  for (int i = 0; i < p->nsteps; i++)
    if (!p->steps[i].deferred) print_step(&p->steps[i], i, ms[i]);
}
