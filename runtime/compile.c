/* Compiled code through one pipeline for both devices (compile.h): the
 * in-memory cache (bounded; code it evicts is unloaded once no program runs
 * it), then the disk cache, then the backend. The CPU's
 * kernels are the first user; runtime/cuda/cuda_exec.c the second. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "backends/llvm/llvm_backend.h"
#include "backends/nvrtc/nvrtc_backend.h"
#include "runtime/compile.h"
#include "runtime/disk_cache.h"
#include "runtime/runtime.h"

struct lm_code {
  _Atomic int64_t refs;
  const lm_code_backend *backend;
  lm_loaded loaded;
};

const void *lm_code_fn(const lm_code *code) { return code->loaded.fn; }

void lm_code_release(lm_code *code) {
  if (!code || atomic_fetch_sub(&code->refs, 1) != 1) return;
  if (code->backend->unload) code->backend->unload(code->loaded.handle);
  free(code);
}

void lm_code_cache_free(void *code) { lm_code_release(code); }

static void code_acquire(void *code) { atomic_fetch_add(&((lm_code *)code)->refs, 1); }

static pthread_once_t capacity_once = PTHREAD_ONCE_INIT;
static size_t capacity = 4096;

static void read_capacity(void) {
  capacity = (size_t)lm_env_count("LOOM_JIT_MAX_KERNELS", capacity);
}

size_t lm_code_cache_capacity(void) {
  pthread_once(&capacity_once, read_capacity);
  return capacity;
}

/* The binary on disk, loaded; a binary that does not load is removed. */
static bool load_from_disk(lm_hash128 disk_key, const lm_code_backend *b, void *ctx,
                           lm_loaded *out) {
  size_t len = 0;
  void *bin = lm_disk_load(disk_key, &len);
  if (!bin) return false;
  char err[512];
  loom_status st = b->load(ctx, bin, len, out, err, sizeof err);
  free(bin);
  if (st != LOOM_OK) lm_disk_remove(disk_key); /* valid bytes, unusable code: rebuild */
  return st == LOOM_OK;
}

static loom_status build_and_store(const char *op, lm_hash128 disk_key, const lm_code_backend *b,
                                   void *ctx, lm_loaded *out) {
  char err[4096];
  void *bin = NULL;
  size_t len = 0;
  uint64_t start = lm_now_ns();
  loom_status st = b->build(ctx, &bin, &len, err, sizeof err);
  if (st == LOOM_OK) {
    lm_disk_store(disk_key, bin, len);
    st = b->load(ctx, bin, len, out, err, sizeof err);
  }
  free(bin);
  lm_stat_add(LM_STAT_COMPILE_NS, lm_now_ns() - start);
  if (st != LOOM_OK) return lm_fail(st, "%s: %s", op, err);
  return LOOM_OK;
}

loom_status lm_code_get(const char *op, lm_cache *cache, lm_hash128 memory_key, lm_hash128 disk_key,
                        const lm_code_backend *b, void *ctx, lm_code **code, lm_stat *counted) {
  lm_cache_set_capacity(cache, lm_code_cache_capacity());
  *code = lm_cache_get(cache, memory_key, code_acquire);
  if (counted) *counted = LM_STAT_KERNEL_CACHE_HITS;
  if (*code) {
    lm_stat_add(LM_STAT_KERNEL_CACHE_HITS, 1);
    return LOOM_OK;
  }
  char err[1024];
  loom_status prepared = b->prepare ? b->prepare(ctx, err, sizeof err) : LOOM_OK;
  if (prepared != LOOM_OK) return lm_fail(prepared, "%s: %s", op, err);
  lm_loaded loaded = {0};
  bool from_disk = load_from_disk(disk_key, b, ctx, &loaded);
  if (!from_disk) {
    loom_status st = build_and_store(op, disk_key, b, ctx, &loaded);
    if (st != LOOM_OK) return st;
  }
  lm_code *made = malloc(sizeof *made);
  if (!made) {
    if (b->unload) b->unload(loaded.handle);
    return lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
  }
  atomic_init(&made->refs, 1); /* the cache's, once stored; the put acquires the caller's */
  made->backend = b;
  made->loaded = loaded;
  bool inserted = false;
  lm_code *stored = lm_cache_put(cache, memory_key, made, code_acquire, &inserted);
  if (!inserted) {
    lm_code_release(made); /* kept another thread's (acquired for us), or no memory */
    if (!stored) return lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
  }
  /* counted once per kernel: when threads made the same code at once (the JIT
   * then hands all of them one function), those that did not insert it found
   * it in memory; identical runs once differed by the number of such races
   * (462 and 465 kernels compiled) */
  lm_stat how = !inserted   ? LM_STAT_KERNEL_CACHE_HITS
                : from_disk ? LM_STAT_DISK_CACHE_HITS
                            : LM_STAT_KERNELS_COMPILED;
  lm_stat_add(how, 1);
  if (counted) *counted = how;
  *code = stored;
  return LOOM_OK;
}

/* ------------------------------------------------------------ CPU kernels */

/* Kernels and GEMM block functions alike (their keys apart: a GEMM's is
 * marked), so one capacity bounds the CPU's loaded code. */
static lm_cache cpu_code = LM_CODE_CACHE_INIT;

/* A kernel, or (k NULL) a GEMM block function. */
typedef struct cpu_kernel {
  const lk_kernel *k;
  const lk_gemm *gemm;
  char symbol[36];
} cpu_kernel;

static loom_status cpu_build(void *ctx, void **bin, size_t *len, char *err, size_t errlen) {
  const cpu_kernel *c = ctx;
  char why[1024];
  loom_status st = c->k ? lm_llvm_emit_object(c->k, c->symbol, bin, len, why, sizeof why)
                        : lm_llvm_emit_gemm_object(c->gemm, c->symbol, bin, len, why, sizeof why);
  if (st != LOOM_OK) snprintf(err, errlen, "compiling kernel %s: %s", c->symbol, why);
  return st;
}

static loom_status cpu_load(void *ctx, const void *bin, size_t len, lm_loaded *out, char *err,
                            size_t errlen) {
  const cpu_kernel *c = ctx;
  char why[512];
  lk_fn fn = NULL;
  lm_llvm_object *held = NULL;
  loom_status st = lm_llvm_load_object(bin, len, c->symbol, &fn, &held, why, sizeof why);
  if (st != LOOM_OK) snprintf(err, errlen, "compiling kernel %s: %s", c->symbol, why);
  *out = (lm_loaded){(const void *)fn, held};
  return st;
}

static void cpu_unload(void *handle) {
  if (lm_llvm_release(handle)) lm_stat_add(LM_STAT_KERNELS_UNLOADED, 1);
}

static const lm_code_backend cpu_backend = {NULL, cpu_build, cpu_load, cpu_unload};

void lm_kernel_symbol(const lk_kernel *k, char symbol[36]) { lm_llvm_symbol_name(k, symbol); }

loom_status lm_kernel_object(const lk_kernel *k, char symbol[36], void **obj, size_t *len) {
  lk_hash h = lk_kernel_hash(k);
  lm_llvm_symbol_name(k, symbol);
  if ((*obj = lm_disk_load(lm_disk_key(h.lo, h.hi), len))) return LOOM_OK;
  char err[1024];
  loom_status st = lm_llvm_emit_object(k, symbol, obj, len, err, sizeof err);
  if (st != LOOM_OK) return lm_fail(st, "compiling kernel %s: %s", symbol, err);
  return LOOM_OK;
}

static loom_status kernel_function(const lk_kernel *k, lk_fn *fn, lm_code **code, lm_stat *how) {
  lk_hash h = lk_kernel_hash(k);
  cpu_kernel c = {k, NULL, {0}};
  lm_llvm_symbol_name(k, c.symbol);
  loom_status st = lm_code_get("loom_realize", &cpu_code, (lm_hash128){h.lo, h.hi},
                               lm_disk_key(h.lo, h.hi), &cpu_backend, &c, code, how);
  *fn = st == LOOM_OK ? (lk_fn)(uintptr_t)lm_code_fn(*code) : NULL;
  return st;
}

loom_status lm_kernel_function(const lk_kernel *k, lk_fn *fn, lm_code **code) {
  return kernel_function(k, fn, code, NULL);
}

/* ------------------------------------------------------------ shape-generic kernels */

/*
 * What the runtime remembers of each kernel shape (lk_kernel_shape_hash of a
 * regrouped kernel) it has been asked for: the sizes it saw first, and which
 * sizes have differed since (lift). A table of SHAPE_SLOTS records, open
 * addressing; when it fills up it starts over (forgetting costs at most one
 * more specialized compile per shape). Guarded by shapes_lock: kernels of a
 * program compile on the pool's threads at once.
 */
#define SHAPE_SLOTS 4096
typedef struct shape_record {
  lm_hash128 shape;
  int nsizes;
  int64_t *first;
  unsigned char *lift;
} shape_record;
static pthread_mutex_t shapes_lock = PTHREAD_MUTEX_INITIALIZER;
static shape_record *shapes; /* SHAPE_SLOTS records once allocated; nsizes 0: empty */
static size_t nshapes;

static void forget_shapes(void) {
  for (size_t i = 0; i < SHAPE_SLOTS; i++) {
    free(shapes[i].first);
    free(shapes[i].lift);
    shapes[i] = (shape_record){0};
  }
  nshapes = 0;
}

/* ALWAYS lifts every extent and every size constant but -1, 0 and 1 at first
 * sight (strides of 1 keep their loops contiguous, offsets of 0 vanish). */
static void lift_always(const int64_t *sizes, int ndim, int n, unsigned char *lift) {
  for (int i = 0; i < n; i++) lift[i] = i < ndim || sizes[i] < -1 || sizes[i] > 1;
}

/* lift = which of the n sizes the generic kernel of this shape reads at run
 * time: those that differed from the first kernel of the shape, ever (or,
 * with `always`, the lift_always set too). Records the shape when new.
 * Returns whether anything is lifted; false (specialize) when out of memory. */
static bool shape_lift(lm_hash128 shape, const int64_t *sizes, int ndim, int n, bool always,
                       unsigned char *lift) {
  bool any = false;
  pthread_mutex_lock(&shapes_lock);
  if (!shapes) shapes = calloc(SHAPE_SLOTS, sizeof *shapes);
  if (!shapes) goto done;
  if (nshapes >= SHAPE_SLOTS / 2) forget_shapes();
  size_t at = (size_t)(shape.lo % SHAPE_SLOTS);
  while (shapes[at].nsizes && (shapes[at].shape.lo != shape.lo || shapes[at].shape.hi != shape.hi))
    at = (at + 1) % SHAPE_SLOTS;
  shape_record *r = &shapes[at];
  if (!r->nsizes) { /* first sight */
    int64_t *first = malloc(sizeof *first * (size_t)n);
    unsigned char *initial = calloc((size_t)n, 1);
    if (!first || !initial) {
      free(first);
      free(initial);
      goto done;
    }
    memcpy(first, sizes, sizeof *first * (size_t)n);
    if (always) lift_always(sizes, ndim, n, initial);
    *r = (shape_record){shape, n, first, initial};
    nshapes++;
  }
  if (r->nsizes != n) goto done; /* a hash collision: specialize */
  for (int i = 0; i < n; i++) {
    r->lift[i] |= sizes[i] != r->first[i];
    lift[i] = r->lift[i];
    any |= lift[i];
  }
done:
  pthread_mutex_unlock(&shapes_lock);
  return any;
}

loom_status lm_kernel_generalized(const lk_kernel *k, lm_generic_target target, lk_kernel *out,
                                  int64_t **sizes) {
  *sizes = NULL;
  loom_dynamic mode = loom_dynamic_mode();
  bool empty = false;
  for (int d = 0; d < k->ndim; d++) empty |= k->dom[d] == 0;
  if (mode == LOOM_DYNAMIC_OFF || empty || lk_kernel_is_generic(k)) return LOOM_OK;
  bool cpu = target == LM_GENERIC_CPU;
  lk_kernel grouped, r;
  lk_inst *regrouped = cpu ? lk_kernel_regroup_dims(k, &grouped) : NULL;
  if (!cpu) grouped = *k; /* the CUDA generator takes kernels as lowered */
  lk_inst *base = cpu && !regrouped ? NULL : lk_kernel_unshare_sizes(&grouped, &r);
  free(regrouped);
  int n = !base ? 0 : lk_kernel_count_sizes(&r);
  int64_t *all = malloc(sizeof *all * (size_t)(n + 1));
  int64_t *values = malloc(sizeof *values * (size_t)(n + 1));
  unsigned char *lift = malloc((size_t)n + 1);
  loom_status st = LOOM_OK;
  if (!base || !all || !values || !lift) {
    st = lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory compiling a kernel");
    goto done;
  }
  lk_kernel_sizes(&r, all);
  lk_hash h = lk_kernel_shape_hash(&r);
  lm_hash128 shape = {h.lo, h.hi ^ (cpu ? 0 : 0x2545f4914f6cdd1dull)}; /* apart per target */
  if (!shape_lift(shape, all, r.ndim, n, mode == LOOM_DYNAMIC_ALWAYS, lift)) goto done;
  lk_inst *inst = lk_kernel_generalize(&r, lift, out, values);
  if (!inst) {
    st = lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory compiling a kernel");
    goto done;
  }
  if (!cpu && out->nsizes > LM_CUDA_MAX_SIZES) { /* more than a launch passes: specialize */
    free(inst);
    goto done;
  }
  if (lm_env_flag("LOOM_DEBUG")) {
    fputs("generic:\n", stderr);
    lk_kernel_print(out, stderr);
  }
  *sizes = values;
  values = NULL;
done:
  free(base);
  free(all);
  free(values);
  free(lift);
  return st;
}

loom_status lm_kernel_generic_lifted(const char *op, const lk_kernel *k, const unsigned char *vary,
                                     lk_kernel *out, int64_t **sizes) {
  *sizes = NULL;
  lk_kernel r;
  lk_inst *base = lk_kernel_unshare_sizes(k, &r);
  int n = !base ? 0 : lk_kernel_count_sizes(&r);
  int64_t *all = malloc(sizeof *all * (size_t)(n + 1));
  int64_t *values = malloc(sizeof *values * (size_t)(n + 1));
  unsigned char *lift = malloc((size_t)n + 1);
  lk_inst *inst = NULL;
  bool any = false;
  if (base && all && values && lift) {
    lk_kernel_sizes(&r, all);
    lift_always(all, r.ndim, n, lift);
    for (int i = 0, j = 0; i < n; i++) /* vary counts the lifted ones */
      if (lift[i]) lift[i] = !vary || vary[j++], any |= lift[i];
    inst = any ? lk_kernel_generalize(&r, lift, out, values) : base;
  }
  if (inst != base) free(base);
  free(all);
  free(lift);
  if (!inst) {
    free(values);
    return lm_fail(LOOM_ERR_OOM, "%s: out of memory generalizing a kernel", op);
  }
  if (!any) { /* nothing varies: k itself */
    free(base);
    free(values);
    return LOOM_OK;
  }
  *sizes = values;
  return LOOM_OK;
}

loom_status lm_kernel_generic_all(const char *op, const lk_kernel *k, lk_kernel *out,
                                  int64_t **sizes) {
  return lm_kernel_generic_lifted(op, k, NULL, out, sizes);
}

void lm_generic_counted(lm_stat how) {
  if (how == LM_STAT_KERNELS_COMPILED) lm_stat_add(LM_STAT_GENERIC_KERNELS_COMPILED, 1);
  lm_stat_add(LM_STAT_GENERIC_KERNEL_USES, 1);
}

loom_status lm_kernel_function_sized(const lk_kernel *k, lk_fn *fn, lm_code **code, int64_t **sizes,
                                     int *nsizes) {
  *nsizes = 0;
  lk_kernel g;
  loom_status st = lm_kernel_generalized(k, LM_GENERIC_CPU, &g, sizes);
  if (st != LOOM_OK || !*sizes) return st != LOOM_OK ? st : lm_kernel_function(k, fn, code);
  lm_stat how;
  st = kernel_function(&g, fn, code, &how);
  free(g.inst);
  if (st != LOOM_OK) {
    free(*sizes);
    *sizes = NULL;
    return st;
  }
  lm_generic_counted(how);
  *nsizes = g.nsizes;
  return LOOM_OK;
}

loom_status lm_kernel_function_lifted(const char *op, const lk_kernel *k, const unsigned char *vary,
                                      lk_fn *fn, lm_code **code, int64_t **sizes, int *nsizes) {
  *nsizes = 0;
  lk_kernel g;
  loom_status st = lm_kernel_generic_lifted(op, k, vary, &g, sizes);
  if (st != LOOM_OK) return st;
  if (!*sizes) return lm_kernel_function(k, fn, code);
  lm_stat how;
  st = kernel_function(&g, fn, code, &how);
  free(g.inst);
  if (st != LOOM_OK) {
    free(*sizes);
    *sizes = NULL;
    return st;
  }
  lm_generic_counted(how);
  *nsizes = g.nsizes;
  return LOOM_OK;
}

/* ------------------------------------------------------------ CPU GEMM blocks */

static lm_hash128 gemm_disk_key(const lk_gemm *d) {
  lk_hash h = lk_gemm_hash(d);
  char ident[1536];
  snprintf(ident, sizeof ident, "gemm|%016llx%016llx|%s", (unsigned long long)h.hi,
           (unsigned long long)h.lo, lm_llvm_target_id());
  return lm_disk_key_text(ident);
}

/* Written once under pthread_once, read-only afterwards. */
static struct amx_state {
  bool usable;
  const char *why_not;
} amx;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_ask(void) {
  const char *env = getenv("LOOM_AMX");
  if (env && strcmp(env, "0") == 0) {
    amx.why_not = "LOOM_AMX=0";
    return;
  }
  if (!lm_llvm_has_amx_bf16()) {
    amx.why_not = "the CPU has no AMX-BF16";
    return;
  }
#if defined(__linux__) && defined(__x86_64__)
  /* the tiles' state is large, so Linux hands it out only when asked */
  enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
  if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
    amx.why_not = "the kernel refused the tiles (arch_prctl ARCH_REQ_XCOMP_PERM)";
    return;
  }
  amx.usable = true;
#else
  amx.why_not = "loom asks for the tiles on Linux x86-64 only";
#endif
}

bool lm_cpu_amx_usable(const char **why_not) {
  pthread_once(&amx_once, amx_ask);
  if (why_not) *why_not = amx.usable ? NULL : amx.why_not;
  return amx.usable;
}

bool loom_cpu_amx(const char **why_not) { return lm_cpu_amx_usable(why_not); }

const char *loom_cpu_bf16_products(void) {
  lk_gemm tile;
  lm_gemm_tile_for(LOOM_BF16, 1024, 1024, &tile);
  return tile.amx ? "amx" : tile.dot_pairs ? "avx512-bf16" : "widened";
}

void lm_gemm_tile_for(loom_dtype in_dtype, int64_t m, int64_t n, lk_gemm *tile) {
  bool amx_ok = in_dtype == LOOM_BF16 && lm_cpu_amx_usable(NULL);
  lm_llvm_gemm_tile(in_dtype, amx_ok, m, n, tile);
}

loom_status lm_gemm_function(const lk_gemm *d, lk_gemm_fn *fn, lm_code **code) {
  lk_hash h = lk_gemm_hash(d);
  cpu_kernel c = {NULL, d, {0}};
  lm_llvm_gemm_symbol_name(d, c.symbol);
  lm_hash128 memory_key = {h.lo, h.hi ^ 0x6a09e667f3bcc909ull}; /* apart from kernels' */
  loom_status st = lm_code_get("loom_realize", &cpu_code, memory_key, gemm_disk_key(d),
                               &cpu_backend, &c, code, NULL);
  *fn = st == LOOM_OK ? (lk_gemm_fn)(uintptr_t)lm_code_fn(*code) : NULL;
  return st;
}

void lm_gemm_symbol(const lk_gemm *d, char symbol[36]) { lm_llvm_gemm_symbol_name(d, symbol); }

loom_status lm_gemm_object(const lk_gemm *d, char symbol[36], void **obj, size_t *len) {
  lm_llvm_gemm_symbol_name(d, symbol);
  if ((*obj = lm_disk_load(gemm_disk_key(d), len))) return LOOM_OK;
  char err[1024];
  loom_status st = lm_llvm_emit_gemm_object(d, symbol, obj, len, err, sizeof err);
  if (st != LOOM_OK) return lm_fail(st, "compiling GEMM %s: %s", symbol, err);
  return LOOM_OK;
}
