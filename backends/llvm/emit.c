/*
 * Kernel -> object file: codegen, verify, optimize (default<O3>; GEMM blocks a
 * short pass list), emit; plus the LOOM_DEBUG / LOOM_DUMP output.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "backends/llvm/llvm_internal.h"

static bool env_flag(const char *name) {
  const char *v = getenv(name);
  return v && *v && strcmp(v, "0") != 0;
}

/* ------------------------------------------------------------------ diagnostics */

/* LLVM's default handler exits the process on an error diagnostic: collect
 * instead, and fail the compile. */
typedef struct diagnostics {
  bool error;
  char first_error[512];
  bool debug;
} diagnostics;

static void on_diagnostic(LLVMDiagnosticInfoRef info, void *ctx) {
  diagnostics *d = ctx;
  LLVMDiagnosticSeverity sev = LLVMGetDiagInfoSeverity(info);
  char *text = LLVMGetDiagInfoDescription(info);
  if (sev == LLVMDSError && !d->error) {
    d->error = true;
    snprintf(d->first_error, sizeof d->first_error, "%s", text ? text : "");
  }
  if (d->debug && sev != LLVMDSRemark) fprintf(stderr, "loom: llvm: %s\n", text ? text : "");
  LLVMDisposeMessage(text);
}

/* ------------------------------------------------------------------ steps */

/* What one compile makes: a kernel or a GEMM block function. */
typedef struct unit {
  const lk_kernel *kernel; /* NULL for a GEMM */
  const lk_gemm *gemm;
  const char *symbol;
} unit;

static loom_status fail_with_message(char *err, size_t errlen, const char *symbol, const char *what,
                                     char *msg) {
  lm_set_err(err, errlen, "kernel %s: %s: %s", symbol, what, msg ? msg : "(no message)");
  LLVMDisposeMessage(msg);
  return LOOM_ERR_COMPILE;
}

static void set_target(LLVMModuleRef mod, LLVMTargetMachineRef tm) {
  char *triple = LLVMGetTargetMachineTriple(tm);
  LLVMSetTarget(mod, triple);
  LLVMDisposeMessage(triple);
  LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
  LLVMSetModuleDataLayout(mod, dl);
  LLVMDisposeTargetData(dl);
}

static loom_status verify(LLVMModuleRef mod, const char *symbol, char *err, size_t errlen) {
  char *msg = NULL;
  if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg))
    return fail_with_message(err, errlen, symbol, "generated IR is invalid", msg);
  LLVMDisposeMessage(msg);
  return LOOM_OK;
}

/* Kernels get LLVM's loop vectorizer, SLP and interleaving (their IR is
 * scalar). A GEMM block function's IR is vectors and unrolled tiles already,
 * so it gets only what its form needs: its alwaysinline helpers (micro-
 * kernels, packing) inlined, its variables in registers, redundancies and
 * branches folded. Under O3 those functions took 0.54-0.91 s each to build
 * (GPT-2 124M's three), under this list 0.2 s, with the micro-kernels' loops
 * the same instructions and the products as fast (docs/gemm.md,
 * "loom's own GEMM"). AMX blocks keep O3: the only AMX CPU they have run on
 * ran them so, and this machine has none to check another pipeline on. */
#define GEMM_PASSES "always-inline,function(sroa,early-cse,instcombine,simplifycfg)"
static loom_status optimize(LLVMModuleRef mod, LLVMTargetMachineRef tm, const unit *u, char *err,
                            size_t errlen) {
  bool vectorized = u->gemm != NULL;
  LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
  LLVMPassBuilderOptionsSetLoopVectorization(opts, !vectorized);
  LLVMPassBuilderOptionsSetSLPVectorization(opts, !vectorized);
  LLVMPassBuilderOptionsSetLoopInterleaving(opts, !vectorized);
  /* Unrolling on for kernels, but codegen marks every loop except reduction
   * loops llvm.loop.unroll.disable (see loop_end in codegen.c). */
  LLVMPassBuilderOptionsSetLoopUnrolling(opts, !vectorized);
  const char *passes = vectorized && !u->gemm->amx ? GEMM_PASSES : "default<O3>";
  LLVMErrorRef e = LLVMRunPasses(mod, passes, tm, opts);
  LLVMDisposePassBuilderOptions(opts);
  if (e)
    return fail_with_message(err, errlen, u->symbol, "optimization failed", LLVMGetErrorMessage(e));
  return LOOM_OK;
}

static loom_status emit_file(LLVMModuleRef mod, LLVMTargetMachineRef tm, LLVMCodeGenFileType type,
                             const char *symbol, LLVMMemoryBufferRef *out, char *err,
                             size_t errlen) {
  char *msg = NULL;
  if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, type, &msg, out)) {
    *out = NULL;
    return fail_with_message(err, errlen, symbol, "code emission failed", msg);
  }
  LLVMDisposeMessage(msg);
  return LOOM_OK;
}

/* ------------------------------------------------------------------ debug output */

static void dump_text(const char *dir, const char *symbol, const char *ext, const char *text,
                      size_t len) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s%s", dir, symbol, ext);
  FILE *f = fopen(path, "w");
  if (!f || fwrite(text, 1, len, f) != len)
    fprintf(stderr, "loom: LOOM_DUMP: cannot write %s: %s\n", path, strerror(errno));
  if (f) fclose(f);
}

static void print_unit(const unit *u, FILE *f) {
  if (u->kernel)
    lk_kernel_print(u->kernel, f);
  else
    fprintf(f, "gemm %s, tile %d x %d\n", loom_dtype_name(u->gemm->dtype), u->gemm->mr,
            u->gemm->nr);
}

static void dump_listing(const char *dir, const unit *u) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.txt", dir, u->symbol);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "loom: LOOM_DUMP: cannot write %s: %s\n", path, strerror(errno));
    return;
  }
  print_unit(u, f);
  fclose(f);
}

/* Assembly comes from a clone: emission runs codegen-prepare passes that
 * modify the module, and the object must come from the untouched one. */
static void dump_assembly(const char *dir, const char *symbol, LLVMModuleRef mod,
                          LLVMTargetMachineRef tm) {
  LLVMModuleRef clone = LLVMCloneModule(mod);
  LLVMMemoryBufferRef asm_buf = NULL;
  char err[512];
  if (emit_file(clone, tm, LLVMAssemblyFile, symbol, &asm_buf, err, sizeof err) == LOOM_OK) {
    dump_text(dir, symbol, ".s", LLVMGetBufferStart(asm_buf), LLVMGetBufferSize(asm_buf));
    LLVMDisposeMemoryBuffer(asm_buf);
  } else {
    fprintf(stderr, "loom: LOOM_DUMP: %s\n", err);
  }
  LLVMDisposeModule(clone);
}

static void debug_output(const unit *u, LLVMModuleRef mod, LLVMTargetMachineRef tm) {
  const char *symbol = u->symbol;
  bool debug = env_flag("LOOM_DEBUG");
  const char *dir = getenv("LOOM_DUMP");
  bool dump = dir && *dir;
  if (!debug && !dump) return;
  char *ir = LLVMPrintModuleToString(mod);
  if (debug) {
    fprintf(stderr, "loom: kernel %s\n", symbol);
    print_unit(u, stderr);
    fputs(ir, stderr);
  }
  if (dump) {
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
      fprintf(stderr, "loom: LOOM_DUMP: cannot create %s: %s\n", dir, strerror(errno));
    dump_listing(dir, u);
    dump_text(dir, symbol, ".ll", ir, strlen(ir));
    dump_assembly(dir, symbol, mod, tm);
  }
  LLVMDisposeMessage(ir);
}

/* ------------------------------------------------------------------ all together */

static loom_status build_and_emit(LLVMContextRef ctx, LLVMTargetMachineRef tm, const unit *u,
                                  LLVMMemoryBufferRef *out, char *err, size_t errlen) {
  LLVMModuleRef mod = NULL;
  const char *symbol = u->symbol;
  loom_status st = u->kernel ? lm_codegen_module(ctx, u->kernel, symbol, &mod, err, errlen)
                             : lm_gemm_module(ctx, u->gemm, symbol, &mod, err, errlen);
  if (st != LOOM_OK) return st;
  set_target(mod, tm);
  st = verify(mod, symbol, err, errlen);
  if (st == LOOM_OK) st = optimize(mod, tm, u, err, errlen);
  if (st == LOOM_OK) debug_output(u, mod, tm);
  if (st == LOOM_OK) st = emit_file(mod, tm, LLVMObjectFile, symbol, out, err, errlen);
  LLVMDisposeModule(mod);
  return st;
}

static loom_status emit_unit(const unit *u, LLVMMemoryBufferRef *out, char *err, size_t errlen) {
  const char *symbol = u->symbol;
  /* A target machine per compile: emission is not documented as thread-safe. */
  LLVMTargetMachineRef tm = lm_target_machine_create(err, errlen);
  if (!tm) return LOOM_ERR_COMPILE;
  diagnostics diag = {.debug = env_flag("LOOM_DEBUG")};
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMContextSetDiagnosticHandler(ctx, on_diagnostic, &diag);
  loom_status st = build_and_emit(ctx, tm, u, out, err, errlen);
  if (st == LOOM_OK && diag.error) {
    lm_set_err(err, errlen, "kernel %s: LLVM error: %s", symbol, diag.first_error);
    LLVMDisposeMemoryBuffer(*out);
    *out = NULL;
    st = LOOM_ERR_COMPILE;
  }
  LLVMContextDispose(ctx);
  LLVMDisposeTargetMachine(tm);
  return st;
}

loom_status lm_emit_object_buffer(const lk_kernel *k, const char *symbol, LLVMMemoryBufferRef *out,
                                  char *err, size_t errlen) {
  *out = NULL;
  const char *bad = lk_kernel_check(k);
  if (bad) {
    lm_set_err(err, errlen, "kernel %s is invalid: %s", symbol, bad);
    return LOOM_ERR_COMPILE;
  }
  unit u = {.kernel = k, .symbol = symbol};
  return emit_unit(&u, out, err, errlen);
}

loom_status lm_emit_gemm_object_buffer(const lk_gemm *d, const char *symbol,
                                       LLVMMemoryBufferRef *out, char *err, size_t errlen) {
  *out = NULL;
  const char *bad = lk_gemm_check(d);
  if (bad) {
    lm_set_err(err, errlen, "GEMM %s is invalid: %s", symbol, bad);
    return LOOM_ERR_COMPILE;
  }
  unit u = {.gemm = d, .symbol = symbol};
  return emit_unit(&u, out, err, errlen);
}
