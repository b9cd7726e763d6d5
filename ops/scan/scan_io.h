/* The scan step (LM_STEP_SCAN) at the io layer: its row of the formats' step
 * kinds (ops/scan/scan_io.c). */
#ifndef LOOM_OPS_SCAN_IO_H
#define LOOM_OPS_SCAN_IO_H

#include "io/step_kinds.h"

/* ops/scan/scan_cpu.c's text (generated at build time), for exports */
extern const char lm_scan_cpu_source[];

/* Its row of lm_step_kind_ios (io/step_kinds.h). */
extern const lm_step_kind_io lm_scan_step_io;

#endif
