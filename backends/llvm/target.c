/*
 * The host target: LLVM's native target initialized once, target machines for
 * code generation, and the target id that goes into cache keys.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <llvm-c/Target.h>
#include <llvm/Config/llvm-config.h>

#include "backends/llvm/llvm_internal.h"

#ifndef LOOM_CODEGEN_ID /* CMakeLists.txt defines it for this file */
#error "LOOM_CODEGEN_ID (a hash of the code generators' sources) is not defined"
#endif

/* Written once under pthread_once, read-only afterwards. */
static struct host_target {
  bool ok;
  char failure[256];
  char triple[128];
  char cpu[128];
  char features[4096];
  char id[4608];
} host;

static pthread_once_t host_once = PTHREAD_ONCE_INIT;

static void copy_llvm_string(char *dst, size_t cap, char *s) {
  snprintf(dst, cap, "%s", s ? s : "");
  LLVMDisposeMessage(s);
}

static void host_init(void) {
  if (LLVMInitializeNativeTarget() || LLVMInitializeNativeAsmPrinter()) {
    snprintf(host.failure, sizeof host.failure, "LLVM has no native target for this machine");
    return;
  }
  copy_llvm_string(host.triple, sizeof host.triple, LLVMGetDefaultTargetTriple());
  copy_llvm_string(host.cpu, sizeof host.cpu, LLVMGetHostCPUName());
  /* LLVM 14 calls newer CPUs "generic": the feature string is what enables
   * AVX2 / AVX-512 / FMA, so it must reach the target machine. */
  copy_llvm_string(host.features, sizeof host.features, LLVMGetHostCPUFeatures());
  int n = snprintf(host.id, sizeof host.id, "llvm-%s/%s/%s/%s/cg%s", LLVM_VERSION_STRING,
                   host.triple, host.cpu, host.features, LOOM_CODEGEN_ID);
  if (n < 0 || (size_t)n >= sizeof host.id) {
    snprintf(host.failure, sizeof host.failure, "host CPU feature string is too long");
    return;
  }
  host.ok = true;
}

bool lm_target_init(char *err, size_t errlen) {
  pthread_once(&host_once, host_init);
  if (!host.ok) lm_set_err(err, errlen, "%s", host.failure);
  return host.ok;
}

const char *lm_llvm_target_id(void) {
  pthread_once(&host_once, host_init);
  return host.ok ? host.id : "llvm-unavailable";
}

LLVMTargetMachineRef lm_target_machine_create(char *err, size_t errlen) {
  if (!lm_target_init(err, errlen)) return NULL;
  LLVMTargetRef target;
  char *msg = NULL;
  if (LLVMGetTargetFromTriple(host.triple, &target, &msg)) {
    lm_set_err(err, errlen, "no LLVM target for %s: %s", host.triple, msg ? msg : "");
    LLVMDisposeMessage(msg);
    return NULL;
  }
  /* JITDefault picks the code model LLJIT itself uses for in-process code (large
   * on x86-64), so relocations never depend on where sections land in memory. */
  LLVMTargetMachineRef tm =
      LLVMCreateTargetMachine(target, host.triple, host.cpu, host.features,
                              LLVMCodeGenLevelAggressive, LLVMRelocPIC, LLVMCodeModelJITDefault);
  if (!tm) lm_set_err(err, errlen, "could not create an LLVM target machine for %s", host.triple);
  return tm;
}

int lm_target_vector_bytes(void) {
  pthread_once(&host_once, host_init);
  if (!host.ok) return 16;
  if (strstr(host.features, "+avx512f")) return 64;
  if (strstr(host.features, "+avx")) return 32;
  return 16;
}

bool lm_target_has_avx512_bf16(void) {
  pthread_once(&host_once, host_init);
  return host.ok && strstr(host.features, "+avx512bf16") && strstr(host.features, "+avx512f");
}

bool lm_target_has_amx_bf16(void) {
  pthread_once(&host_once, host_init);
  return host.ok && strstr(host.features, "+amx-tile") && strstr(host.features, "+amx-bf16") &&
         strstr(host.features, "+avx512f");
}
