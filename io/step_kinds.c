/* The formats' table of step kinds (io/step_kinds.h), in lm_step_kind's
 * order. A library op in a folder of its own has its row there
 * (ops/<op>/<op>_io.c). */
#include "io/step_kinds.h"

#include "ops/scan/scan_io.h"
#include "runtime/attention_step.h"
#include "runtime/check_step.h"
#include "runtime/sort_step.h"

static const lm_step_kind_io kernel_io = {
    .write_text = lm_kernel_write_text,
    .write_export = lm_kernel_write_export,
};

static const lm_step_kind_io gemm_io = {
    .write_text = lm_gemm_write_text,
    .write_export = lm_gemm_write_export,
};

static const char *const attention_fns[] = {"lm_attention_f32", "lm_attention_f32_items",
                                            "lm_attention_grad_f32", "lm_attention_grad_f32_items",
                                            "lm_attention_f32_numbers"};
static const lm_export_kernel attention_kernel = {
    "runtime/attention_cpu.c", lm_attention_cpu_source, LM_EXPORT_FNS(attention_fns), true};
static const lm_step_kind_io attention_io = {
    .write_text = lm_attention_write_text,
    .write_export = lm_attention_write_export,
    .export_kernel = &attention_kernel,
};

static const char *const sort_fns[] = {"lm_sort_rows", "lm_sort_items"};
static const lm_export_kernel sort_kernel = {"runtime/sort_cpu.c", lm_sort_cpu_source,
                                             LM_EXPORT_FNS(sort_fns), false};
static const lm_step_kind_io sort_io = {
    .write_text = lm_sort_write_text,
    .write_export = lm_sort_write_export,
    .export_kernel = &sort_kernel,
};

static const char *const check_fns[] = {"lm_check_values"};
static const lm_export_kernel check_kernel = {"runtime/check_cpu.c", lm_check_cpu_source,
                                              LM_EXPORT_FNS(check_fns), false};
static const lm_step_kind_io check_io = {
    .write_text = lm_check_write_text,
    .write_export = lm_check_write_export,
    .export_kernel = &check_kernel,
};

static const lm_step_kind_io collective_io = {
    .write_text = lm_collective_write_text,
    .write_export = NULL, /* exports refuse collectives (export.c) */
};

const lm_step_kind_io *const lm_step_kind_ios[] = {
    &kernel_io, &gemm_io, &attention_io, &sort_io, &lm_scan_step_io, &check_io, &collective_io,
};
_Static_assert(sizeof lm_step_kind_ios / sizeof *lm_step_kind_ios == LM_STEP_KINDS,
               "every lm_step_kind has its row in lm_step_kind_ios, in the enum's order");
