/* quickstart: loom's core ideas in one page.
 *
 *   lazy ops -> one compiled program -> values only when asked for
 *   scopes free a whole graph at once; loom_keep takes a result out
 *   errors surface at the call that made them, as error tensors
 *   the second run of the same code compiles nothing
 */
#include <stdio.h>

#include "loom.h"

/* pred = x @ w + 1; returns mean(pred), kept out of the scope. */
static loom_tensor *model_mean(loom_key key, loom_tensor **pred_out) {
  loom_tensor *mean = NULL;
  LOOM_SCOPE {
    loom_key k[2];
    loom_key_split(key, k, 2);
    loom_tensor *x = loom_randn_key(k[0], LOOM_SHAPE(4, 2), LOOM_F32, LOOM_CPU);
    loom_tensor *w = loom_randn_key(k[1], LOOM_SHAPE(2, 1), LOOM_F32, LOOM_CPU);
    loom_tensor *pred = loom_add_s(loom_matmul(x, w), 1.0);
    /* Nothing has been computed yet: these are nodes of a graph. */
    mean = loom_keep(loom_mean_all(pred));
    *pred_out = loom_keep(pred);
  } /* the scope's end computes the kept tensors and frees x, w, x @ w */
  return mean;
}

int main(void) {
  printf("loom %s: lazy tensors, compiled\n\n", LOOM_VERSION_STRING);
  loom_reset_stats();

  for (int run = 1; run <= 2; run++) {
    loom_tensor *pred;
    loom_tensor *mean = model_mean(loom_key_new(42), &pred);
    if (run == 1) {
      printf("pred = x @ w + 1 =\n");
      loom_print(pred);
      printf("mean(pred) = %.6f (realized by the scope: %s)\n", loom_item(mean),
             loom_is_realized(mean) ? "yes" : "no");
    }
    loom_stats s = loom_get_stats();
    printf("after run %d: graphs compiled %llu, graph-cache hits %llu, kernels compiled %llu "
           "(loaded from the disk cache %llu), kernels launched %llu, BLAS calls %llu\n",
           run, (unsigned long long)s.graphs_compiled, (unsigned long long)s.graph_cache_hits,
           (unsigned long long)s.kernels_compiled, (unsigned long long)s.disk_cache_hits,
           (unsigned long long)s.kernels_launched, (unsigned long long)s.gemm_calls);
    loom_free(pred);
    loom_free(mean);
  }

  printf("\nAn error surfaces at the call that made it:\n");
  loom_clear_error();
  LOOM_SCOPE {
    loom_tensor *a = loom_ones(LOOM_SHAPE(4, 2), LOOM_F32, LOOM_CPU);
    loom_tensor *b = loom_ones(LOOM_SHAPE(3, 1), LOOM_F32, LOOM_CPU);
    loom_tensor *bad = loom_matmul(a, b);
    loom_tensor *chained = loom_relu(loom_add_s(bad, 1.0)); /* propagates, records nothing */
    printf("  status %s: %s\n", loom_status_name(loom_status_of(chained)),
           loom_error_message(chained));
    printf("  loom_last_error(): %s\n", loom_last_error());
  } /* every reference made inside, error tensors too, is released here */
  loom_stats s = loom_get_stats();
  printf("\nbytes live at exit: %llu (peak %llu)\n", (unsigned long long)s.bytes_live,
         (unsigned long long)s.bytes_peak);
  return 0;
}
