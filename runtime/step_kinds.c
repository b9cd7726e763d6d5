/* The runtime's table of step kinds (runtime/step_kinds.h), in
 * lm_step_kind's order. A library op in a folder of its own has its row there
 * (ops/<op>/<op>_step.c). */
#include "runtime/step_kinds.h"

#include "ops/scan/scan_step.h"
#include "runtime/attention_step.h"
#include "runtime/check_step.h"
#include "runtime/sort_step.h"

static const lm_step_kind_runtime kernel_runtime = {
    .run_cpu = lm_kernel_run_cpu,
    .write_profile = lm_kernel_write_profile,
    .walk = lm_kernel_walk,
};

static const lm_step_kind_runtime gemm_runtime = {
    .run_cpu = lm_gemm_run_cpu,
    .write_profile = lm_gemm_write_profile,
    .walk = lm_gemm_walk,
};

static const lm_step_kind_runtime attention_runtime = {
    .run_cpu = lm_attention_run_cpu,
    .write_profile = lm_attention_write_profile,
    .walk = lm_attention_walk,
};

static const lm_step_kind_runtime sort_runtime = {
    .run_cpu = lm_sort_run_cpu,
    .write_profile = lm_sort_write_profile,
    .walk = lm_sort_walk,
};

static const lm_step_kind_runtime check_runtime = {
    .run_cpu = lm_check_run_cpu,
    .write_profile = lm_check_write_profile,
    .walk = lm_check_walk,
    .may_fail = true,
};

static const lm_step_kind_runtime collective_runtime = {
    .run_cpu = NULL, /* runtime/exec.c runs it through runtime/dist.c */
    .write_profile = lm_collective_write_profile,
    .walk = lm_collective_walk,
};

const lm_step_kind_runtime *const lm_step_kind_runtimes[] = {
    &kernel_runtime,       &gemm_runtime,  &attention_runtime,  &sort_runtime,
    &lm_scan_step_runtime, &check_runtime, &collective_runtime,
};
_Static_assert(sizeof lm_step_kind_runtimes / sizeof *lm_step_kind_runtimes == LM_STEP_KINDS,
               "every lm_step_kind has its row in lm_step_kind_runtimes, in the enum's order");
