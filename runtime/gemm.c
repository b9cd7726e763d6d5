/* GEMM steps through OpenBLAS: one cblas call per batch index. */
#include <cblas.h>
#include <string.h>

#include "passes/passes.h"
#include "runtime/gemm.h"
#include "runtime/runtime.h"

static void one(const lm_gemm *g, const char *a, const char *b, char *c) {
  enum CBLAS_TRANSPOSE ta = g->a_trans ? CblasTrans : CblasNoTrans;
  enum CBLAS_TRANSPOSE tb = g->b_trans ? CblasTrans : CblasNoTrans;
  if (g->dtype == LOOM_F32)
    cblas_sgemm(CblasRowMajor, ta, tb, (blasint)g->M, (blasint)g->N, (blasint)g->K, 1.0f,
                (const float *)a, (blasint)g->lda, (const float *)b, (blasint)g->ldb, 0.0f,
                (float *)c, (blasint)(g->N > 1 ? g->N : 1));
  else
    cblas_dgemm(CblasRowMajor, ta, tb, (blasint)g->M, (blasint)g->N, (blasint)g->K, 1.0,
                (const double *)a, (blasint)g->lda, (const double *)b, (blasint)g->ldb, 0.0,
                (double *)c, (blasint)(g->N > 1 ? g->N : 1));
}

void lm_run_gemm(const lm_gemm *g, const void *a, const void *b, void *c) {
  size_t es = loom_dtype_size(g->dtype);
  int64_t batches = 1;
  for (int d = 0; d < g->nbatch; d++) batches *= g->batch[d];
  int64_t mn = g->M * g->N;
  if (mn == 0 || batches == 0) return;
  if (g->K == 0) {
    memset(c, 0, (size_t)(batches * mn) * es);
    return;
  }
  int64_t idx[LOOM_MAX_DIMS] = {0};
  for (int64_t i = 0; i < batches; i++) {
    int64_t ao = g->a_offset, bo = g->b_offset;
    for (int d = 0; d < g->nbatch; d++)
      ao += idx[d] * g->a_bstride[d], bo += idx[d] * g->b_bstride[d];
    one(g, (const char *)a + ao * (int64_t)es, (const char *)b + bo * (int64_t)es,
        (char *)c + i * mn * (int64_t)es);
    lm_stat_add(LM_STAT_GEMM_CALLS, 1);
    for (int d = g->nbatch - 1; d >= 0; d--) {
      if (++idx[d] < g->batch[d]) break;
      idx[d] = 0;
    }
  }
}
