/* Every workload, family by family, in the order `loom bench` runs them. Add a
 * workload to its family's list; add a family here. */
#include <string.h>

#include "bench.h"

typedef struct family {
  const bench_workload *list;
  const int *count;
} family;

static const family families[] = {
    {bench_elementwise_workloads, &bench_elementwise_count},
    {bench_rows_workloads, &bench_rows_count},
    {bench_matmul_workloads, &bench_matmul_count},
    {bench_compile_workloads, &bench_compile_count},
    {bench_train_workloads, &bench_train_count},
    {bench_program_workloads, &bench_program_count},
    {bench_dynamic_workloads, &bench_dynamic_count},
    {bench_model_workloads, &bench_model_count},
};
#define NUM_FAMILIES ((int)(sizeof families / sizeof families[0]))

int bench_workload_count(void) {
  int n = 0;
  for (int f = 0; f < NUM_FAMILIES; f++) n += *families[f].count;
  return n;
}

const bench_workload *bench_workload_at(int i) {
  for (int f = 0; f < NUM_FAMILIES; f++) {
    if (i < *families[f].count) return &families[f].list[i];
    i -= *families[f].count;
  }
  return NULL;
}

const bench_workload *bench_workload_find(const char *name) {
  for (int i = 0; i < bench_workload_count(); i++)
    if (strcmp(bench_workload_at(i)->name, name) == 0) return bench_workload_at(i);
  return NULL;
}
