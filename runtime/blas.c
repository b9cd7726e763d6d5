/*
 * OpenBLAS's kernels for the CPU it runs on. OpenBLAS (DYNAMIC_ARCH builds, as
 * Debian's) picks its kernels once, when it is loaded, from the CPU's model
 * number; on a CPU newer than the build it falls back to old ones: Debian 12's
 * 0.3.21 runs Prescott (SSE3) kernels on an Emerald Rapids Xeon, 4.7x slower
 * than its SkylakeX kernels there. When libloom is loaded (a constructor: no
 * BLAS call has run yet, and no thread of the program), it checks the core
 * OpenBLAS reports against the CPU's flags (lm_blas_core_for) and, when the
 * core is too old and the user set no OPENBLAS_CORETYPE, has OpenBLAS pick
 * again with OPENBLAS_CORETYPE set: gotoblas_dynamic_init() with its kernel
 * table cleared (both exported by such builds) reads the variable as at load.
 * This holds whether the program or libloom brought OpenBLAS in. A build for
 * one core lacks the two symbols and is left as it is. `loom info` (and
 * loom_blas_info) says what was found and why.
 */
#include "runtime/blas.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "loom.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

char *openblas_get_corename(void);
char *openblas_get_config(void);

static const char *const old_cores[] = {
    "Prescott",   "Core2",     "Penryn",      "Dunnington", "Nehalem", "Atom",         "Katmai",
    "Coppermine", "Northwood", "Banias",      "Athlon",     "Opteron", "Opteron_SSE3", "Barcelona",
    "Bobcat",     "Nano",      "Sandybridge", "Generic",    "unknown"};

static bool is_old(const char *core) {
  for (size_t i = 0; i < sizeof old_cores / sizeof old_cores[0]; i++)
    if (strcasecmp(core, old_cores[i]) == 0) return true;
  return false;
}

/* The widest vectors a core's kernels use, in bits; 0 when unknown. */
static int core_bits(const char *core) {
  static const char *const wide[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
  static const char *const avx2[] = {"Haswell", "Zen", "Excavator"};
  static const char *const avx[] = {"Bulldozer", "Piledriver", "Steamroller"};
  for (size_t i = 0; i < sizeof wide / sizeof *wide; i++)
    if (strcasecmp(core, wide[i]) == 0) return 512;
  for (size_t i = 0; i < sizeof avx2 / sizeof *avx2; i++)
    if (strcasecmp(core, avx2[i]) == 0) return 256;
  for (size_t i = 0; i < sizeof avx / sizeof *avx; i++)
    if (strcasecmp(core, avx[i]) == 0) return 128; /* AVX on 128-bit units */
  return is_old(core) && strcasecmp(core, "unknown") != 0 ? 128 : 0;
}

bool lm_blas_core_narrow(const char *core, lm_cpu_flags flags) {
  int bits = core ? core_bits(core) : 0, cpu = flags.avx512 ? 512 : flags.avx2_fma ? 256 : 128;
  return bits > 0 && bits < cpu;
}

const char *lm_blas_core_fitting(lm_cpu_flags flags) {
  if (flags.avx512) return flags.avx512_bf16 ? "Cooperlake" : "SkylakeX";
  return flags.avx2_fma ? "Haswell" : NULL; /* else nothing better to ask for */
}

const char *lm_blas_core_for(const char *reported, lm_cpu_flags flags) {
  if (!reported || !is_old(reported)) return NULL;
  return lm_blas_core_fitting(flags);
}

lm_cpu_flags lm_cpu_flags_host(void) {
  lm_cpu_flags f = {false, false, false};
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  bool fma = c & (1u << 12), osxsave = c & (1u << 27);
  if (!osxsave) return f;
  unsigned lo, hi;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  bool ymm = (lo & 0x6) == 0x6, zmm = (lo & 0xe6) == 0xe6; /* SSE, AVX (and opmask, ZMM) state */
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2_fma = ymm && fma && (b & (1u << 5));
  bool avx512 = (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 30)) && (b & (1u << 31));
  f.avx512 = zmm && avx512;
  if (f.avx512 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512_bf16 = a & (1u << 5);
#endif
  return f;
}

void openblas_set_num_threads(int num_threads);

void lm_blas_single_threaded(void) { openblas_set_num_threads(1); }

bool lm_blas_use_core(const char *core) {
  void **table = dlsym(RTLD_DEFAULT, "gotoblas");
  void *init = dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init");
  if (!table || !init) return false;
  void (*dynamic_init)(void);
  memcpy(&dynamic_init, &init, sizeof dynamic_init);
  void *previous = *table;
  const char *user = getenv("OPENBLAS_CORETYPE");
  char *saved = user ? strdup(user) : NULL;
  setenv("OPENBLAS_CORETYPE", core, 1);
  *table = NULL;
  dynamic_init(); /* reads OPENBLAS_CORETYPE as at load */
  if (saved)
    setenv("OPENBLAS_CORETYPE", saved, 1);
  else
    unsetenv("OPENBLAS_CORETYPE");
  free(saved);
  if (!*table) *table = previous; /* refused: keep what worked */
  const char *now = openblas_get_corename();
  return now && strcasecmp(now, core) == 0;
}

/* What was found at load; written once, by the constructor, before the
 * program's own code runs (docs/global-state.md). */
static char blas_core[64], blas_reason[256];
static bool blas_narrow;

bool lm_blas_narrow_here(void) { return blas_narrow; }

static void pick_core(lm_cpu_flags flags);
static void choose_core(void) __attribute__((constructor));
static void choose_core(void) {
  lm_cpu_flags flags = lm_cpu_flags_host();
  pick_core(flags);
  blas_narrow = lm_blas_core_narrow(blas_core, flags);
}

static void pick_core(lm_cpu_flags flags) {
  const char *reported = openblas_get_corename();
  snprintf(blas_core, sizeof blas_core, "%s", reported ? reported : "unknown");
  const char *user = getenv("OPENBLAS_CORETYPE");
  if (user && *user) {
    snprintf(blas_reason, sizeof blas_reason, "OPENBLAS_CORETYPE=%s (yours)", user);
    return;
  }
  const char *want = lm_blas_core_for(blas_core, flags);
  if (!want) {
    snprintf(blas_reason, sizeof blas_reason, "OpenBLAS's own detection");
    return;
  }
  const char *simd = flags.avx512 ? (flags.avx512_bf16 ? "AVX-512 and BF16" : "AVX-512") : "AVX2";
  char old[64];
  snprintf(old, sizeof old, "%s", blas_core);
  if (!lm_blas_use_core(want)) {
    snprintf(blas_reason, sizeof blas_reason,
             "OpenBLAS's own detection: %s on a CPU with %s; this OpenBLAS would not switch "
             "to %s (set OPENBLAS_CORETYPE, or use a DYNAMIC_ARCH build)",
             old, simd, want);
    return;
  }
  snprintf(blas_core, sizeof blas_core, "%s", openblas_get_corename());
  snprintf(blas_reason, sizeof blas_reason,
           "OpenBLAS detected %s on a CPU with %s: loom asked for %s", old, simd, want);
}

void loom_blas_info(const char **library, const char **version, const char **core,
                    const char **reason) {
  if (library) {
    Dl_info info;
    void *fn = dlsym(RTLD_DEFAULT, "cblas_sgemm");
    *library = fn && dladdr(fn, &info) && info.dli_fname ? info.dli_fname : "(not found)";
  }
  if (version) *version = openblas_get_config();
  if (core) *core = blas_core;
  if (reason) *reason = blas_reason;
}
