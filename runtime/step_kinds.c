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
    .write_text = lm_kernel_write_text,
    .write_profile = lm_kernel_write_profile,
    .walk = lm_kernel_walk,
    .write_export = lm_kernel_write_export,
};

static const lm_step_kind_runtime gemm_runtime = {
    .run_cpu = lm_gemm_run_cpu,
    .write_text = lm_gemm_write_text,
    .write_profile = lm_gemm_write_profile,
    .walk = lm_gemm_walk,
    .write_export = lm_gemm_write_export,
};

static const char *const attention_fns[] = {"lm_attention_f32", "lm_attention_f32_items",
                                            "lm_attention_grad_f32", "lm_attention_grad_f32_items",
                                            "lm_attention_f32_numbers"};
static const lm_export_kernel attention_kernel = {
    "attention", "runtime/attention_cpu.c", lm_attention_cpu_source, attention_fns, 5, true};
static const lm_step_kind_runtime attention_runtime = {
    .run_cpu = lm_attention_run_cpu,
    .write_text = lm_attention_write_text,
    .write_profile = lm_attention_write_profile,
    .walk = lm_attention_walk,
    .write_export = lm_attention_write_export,
    .export_kernel = &attention_kernel,
};

static const char *const sort_fns[] = {"lm_sort_rows", "lm_sort_items"};
static const lm_export_kernel sort_kernel = {
    "sort", "runtime/sort_cpu.c", lm_sort_cpu_source, sort_fns, 2, false};
static const lm_step_kind_runtime sort_runtime = {
    .run_cpu = lm_sort_run_cpu,
    .write_text = lm_sort_write_text,
    .write_profile = lm_sort_write_profile,
    .walk = lm_sort_walk,
    .write_export = lm_sort_write_export,
    .export_kernel = &sort_kernel,
};

static const char *const check_fns[] = {"lm_check_values"};
static const lm_export_kernel check_kernel = {
    "check", "runtime/check_cpu.c", lm_check_cpu_source, check_fns, 1, false};
static const lm_step_kind_runtime check_runtime = {
    .run_cpu = lm_check_run_cpu,
    .write_text = lm_check_write_text,
    .write_profile = lm_check_write_profile,
    .walk = lm_check_walk,
    .write_export = lm_check_write_export,
    .export_kernel = &check_kernel,
    .may_fail = true,
};

static const lm_step_kind_runtime collective_runtime = {
    .run_cpu = NULL, /* runtime/exec.c runs it through runtime/dist.c */
    .write_text = lm_collective_write_text,
    .write_profile = lm_collective_write_profile,
    .walk = lm_collective_walk,
    .write_export = NULL, /* exports refuse collectives (export.c) */
};

const lm_step_kind_runtime *const lm_step_kind_runtimes[] = {
    &kernel_runtime,       &gemm_runtime,  &attention_runtime,  &sort_runtime,
    &lm_scan_step_runtime, &check_runtime, &collective_runtime,
};
_Static_assert(sizeof lm_step_kind_runtimes / sizeof *lm_step_kind_runtimes == LM_STEP_KINDS,
               "every lm_step_kind has its row in lm_step_kind_runtimes, in the enum's order");
