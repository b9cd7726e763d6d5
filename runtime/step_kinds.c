/* The runtime's table of step kinds (runtime/step_kinds.h), in
 * lm_step_kind's order. */
#include "runtime/step_kinds.h"

#include "runtime/attention_step.h"
#include "runtime/check_step.h"
#include "runtime/scan_step.h"
#include "runtime/sort_step.h"

static const char *const attention_fns[] = {"lm_attention_f32", "lm_attention_f32_items",
                                            "lm_attention_grad_f32", "lm_attention_grad_f32_items",
                                            "lm_attention_f32_numbers"};
static const lm_export_kernel attention_kernel = {"attention", lm_attention_cpu_source,
                                                  attention_fns, 5, true};
static const char *const sort_fns[] = {"lm_sort_rows", "lm_sort_items"};
static const lm_export_kernel sort_kernel = {"sort", lm_sort_cpu_source, sort_fns, 2, false};
static const char *const scan_fns[] = {"lm_scan_sums", "lm_scan_rows", "lm_scan_items",
                                       "lm_scan_parts"};
static const lm_export_kernel scan_kernel = {"scan", lm_scan_cpu_source, scan_fns, 4, false};
static const char *const check_fns[] = {"lm_check_values"};
static const lm_export_kernel check_kernel = {"check", lm_check_cpu_source, check_fns, 1, false};

const lm_step_kind_runtime lm_step_kind_runtimes[] = {
    {lm_kernel_run_cpu, lm_kernel_write_text, lm_kernel_write_profile, lm_kernel_walk,
     lm_kernel_write_export, NULL, false},
    {lm_gemm_run_cpu, lm_gemm_write_text, lm_gemm_write_profile, lm_gemm_walk, lm_gemm_write_export,
     NULL, false},
    {lm_attention_run_cpu, lm_attention_write_text, lm_attention_write_profile, lm_attention_walk,
     lm_attention_write_export, &attention_kernel, false},
    {lm_sort_run_cpu, lm_sort_write_text, lm_sort_write_profile, lm_sort_walk, lm_sort_write_export,
     &sort_kernel, false},
    {lm_scan_run_cpu, lm_scan_write_text, lm_scan_write_profile, lm_scan_walk, lm_scan_write_export,
     &scan_kernel, false},
    {lm_check_run_cpu, lm_check_write_text, lm_check_write_profile, lm_check_walk,
     lm_check_write_export, &check_kernel, true},
    {NULL, lm_collective_write_text, lm_collective_write_profile, lm_collective_walk, NULL, NULL,
     false},
};
_Static_assert(sizeof lm_step_kind_runtimes / sizeof *lm_step_kind_runtimes == LM_STEP_KINDS,
               "every lm_step_kind has its row in lm_step_kind_runtimes, in the enum's order");
