/*
 * The process's LLJIT and the table of functions loaded into it.
 *
 * One LLJIT per process, created on first use. Objects go into its main
 * JITDylib, which also searches the process (libm, memset...). Every symbol
 * is loaded at most once: the table symbol -> function is checked before
 * compiling and again, under the lock, before loading, so two threads that
 * compile the same kernel get the same function.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <xxhash.h>

#include "backends/llvm/llvm_internal.h"

/* One loaded object: its function, the resource tracker that unloads it, and
 * how many holders it has (jit_lock). */
struct lm_llvm_object {
  char *symbol;
  lk_fn fn;
  LLVMOrcResourceTrackerRef tracker;
  int64_t holders;
};

/* Guarded by jit_lock. */
static pthread_mutex_t jit_lock = PTHREAD_MUTEX_INITIALIZER;
static LLVMOrcLLJITRef jit;
static lm_llvm_object **table; /* open addressing by symbol, capacity a power of two */
static size_t table_cap, table_len;

/* What the execution session reported while this thread materialized symbols
 * (lookups run materialization on the calling thread). */
static _Thread_local char session_error[512];

/* ------------------------------------------------------------------ table */

static size_t slot_of(const char *symbol, size_t cap) {
  return (size_t)XXH3_64bits(symbol, strlen(symbol)) & (cap - 1);
}

static size_t table_slot(const char *symbol) { /* of symbol, or the empty slot ending its run */
  size_t i = slot_of(symbol, table_cap);
  while (table[i] && strcmp(table[i]->symbol, symbol) != 0) i = (i + 1) & (table_cap - 1);
  return i;
}

static lm_llvm_object *table_find(const char *symbol) {
  return table_cap ? table[table_slot(symbol)] : NULL;
}

static void table_put(lm_llvm_object **t, size_t cap, lm_llvm_object *o) {
  size_t i = slot_of(o->symbol, cap);
  while (t[i]) i = (i + 1) & (cap - 1);
  t[i] = o;
}

static bool table_insert(lm_llvm_object *o) {
  if (2 * (table_len + 1) > table_cap) { /* keep the load under 1/2 */
    size_t cap = table_cap ? 2 * table_cap : 64;
    lm_llvm_object **t = calloc(cap, sizeof *t);
    if (!t) return false;
    for (size_t i = 0; i < table_cap; i++)
      if (table[i]) table_put(t, cap, table[i]);
    free(table);
    table = t;
    table_cap = cap;
  }
  table_put(table, table_cap, o);
  table_len++;
  return true;
}

/* Removes o's slot, moving later members of its probe run back so that every
 * lookup still finds them (linear probing's deletion, no tombstones). */
static void table_remove(const lm_llvm_object *o) {
  size_t hole = table_slot(o->symbol), mask = table_cap - 1;
  table[hole] = NULL;
  for (size_t i = (hole + 1) & mask; table[i]; i = (i + 1) & mask) {
    size_t home = slot_of(table[i]->symbol, table_cap);
    bool stays = hole <= i ? hole < home && home <= i : hole < home || home <= i;
    if (stays) continue;
    table[hole] = table[i];
    table[i] = NULL;
    hole = i;
  }
  table_len--;
}

static void object_free(lm_llvm_object *o) {
  if (o->tracker) {
    LLVMConsumeError(LLVMOrcResourceTrackerRemove(o->tracker)); /* frees the object's memory */
    LLVMOrcReleaseResourceTracker(o->tracker);
  }
  free(o->symbol);
  free(o);
}

static void table_free(void) {
  for (size_t i = 0; i < table_cap; i++) {
    if (!table[i]) continue;
    free(table[i]->symbol); /* the JIT's disposal frees the code */
    free(table[i]);
  }
  free(table);
  table = NULL;
  table_cap = table_len = 0;
}

/* ------------------------------------------------------------------ JIT */

static loom_status take_error(LLVMErrorRef e, const char *what, const char *symbol, char *err,
                              size_t errlen) {
  char *msg = LLVMGetErrorMessage(e);
  lm_set_err(err, errlen, "kernel %s: %s: %s%s%s", symbol, what, msg, session_error[0] ? "; " : "",
             session_error);
  LLVMDisposeErrorMessage(msg);
  return LOOM_ERR_COMPILE;
}

static void on_session_error(void *ctx, LLVMErrorRef e) {
  (void)ctx;
  char *msg = LLVMGetErrorMessage(e);
  if (!session_error[0]) snprintf(session_error, sizeof session_error, "%s", msg);
  LLVMDisposeErrorMessage(msg);
}

/* Creates the JIT if there is none (jit_lock held). */
static loom_status ensure_jit(const char *symbol, char *err, size_t errlen) {
  if (jit) return LOOM_OK;
  if (!lm_target_init(err, errlen)) return LOOM_ERR_COMPILE;
  LLVMOrcLLJITRef j = NULL;
  LLVMErrorRef e = LLVMOrcCreateLLJIT(&j, LLVMOrcCreateLLJITBuilder()); /* consumes the builder */
  if (e) return take_error(e, "cannot create the LLJIT", symbol, err, errlen);
  LLVMOrcExecutionSessionSetErrorReporter(LLVMOrcLLJITGetExecutionSession(j), on_session_error,
                                          NULL);
  LLVMOrcDefinitionGeneratorRef gen = NULL;
  e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&gen, LLVMOrcLLJITGetGlobalPrefix(j),
                                                           NULL, NULL);
  if (e) {
    LLVMConsumeError(LLVMOrcDisposeLLJIT(j));
    return take_error(e, "cannot search the process for symbols", symbol, err, errlen);
  }
  LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(j), gen); /* takes ownership */
  jit = j;
  return LOOM_OK;
}

/* Adds an object (taking ownership of buf) and looks up `symbol` (jit_lock
 * held). Each object has a resource tracker of its own, kept with it to unload
 * it once it has no holders. One that does not serve `symbol` (a cache entry
 * holding another kernel's code, or one whose dependencies do not resolve) is
 * removed from the JIT at once, so the symbols it defined do not collide with
 * the code rebuilt in its place. */
static loom_status add_and_lookup(LLVMMemoryBufferRef buf, const char *symbol, lm_llvm_object *out,
                                  char *err, size_t errlen) {
  session_error[0] = 0;
  LLVMOrcResourceTrackerRef rt =
      LLVMOrcJITDylibCreateResourceTracker(LLVMOrcLLJITGetMainJITDylib(jit));
  LLVMErrorRef e = LLVMOrcLLJITAddObjectFileWithRT(jit, rt, buf);
  loom_status st = LOOM_OK;
  LLVMOrcExecutorAddress addr = 0;
  if (e) {
    st = take_error(e, "cannot add the object to the JIT", symbol, err, errlen);
  } else if ((e = LLVMOrcLLJITLookup(jit, &addr, symbol))) {
    st = take_error(e, "cannot load the object", symbol, err, errlen);
  } else if (!addr) {
    lm_set_err(err, errlen, "kernel %s: the JIT returned a null address", symbol);
    st = LOOM_ERR_COMPILE;
  }
  if (st != LOOM_OK) {
    LLVMConsumeError(LLVMOrcResourceTrackerRemove(rt));
    LLVMOrcReleaseResourceTracker(rt);
    return st;
  }
  out->fn = (lk_fn)(uintptr_t)addr;
  out->tracker = rt;
  return LOOM_OK;
}

/* Loads buf (consumed) as `symbol` unless that symbol is loaded already; either
 * way the caller becomes one of its holders. */
static loom_status load_buffer(LLVMMemoryBufferRef buf, const char *symbol, lk_fn *out_fn,
                               lm_llvm_object **held, char *err, size_t errlen) {
  pthread_mutex_lock(&jit_lock);
  loom_status st = LOOM_OK;
  lm_llvm_object *o = table_find(symbol);
  if (o) {
    LLVMDisposeMemoryBuffer(buf);
  } else if (!(o = calloc(1, sizeof *o)) || !(o->symbol = strdup(symbol))) {
    LLVMDisposeMemoryBuffer(buf);
    free(o);
    o = NULL;
    lm_set_err(err, errlen, "kernel %s: out of memory recording the loaded function", symbol);
    st = LOOM_ERR_OOM;
  } else {
    st = ensure_jit(symbol, err, errlen);
    if (st == LOOM_OK)
      st = add_and_lookup(buf, symbol, o, err, errlen);
    else
      LLVMDisposeMemoryBuffer(buf);
    if (st == LOOM_OK && !table_insert(o)) {
      lm_set_err(err, errlen, "kernel %s: out of memory recording the loaded function", symbol);
      st = LOOM_ERR_OOM;
    }
    if (st != LOOM_OK) object_free(o);
  }
  if (st == LOOM_OK) o->holders++;
  pthread_mutex_unlock(&jit_lock);
  *out_fn = st == LOOM_OK ? o->fn : NULL;
  if (held) *held = st == LOOM_OK ? o : NULL;
  return st;
}

/* The loaded function of `symbol`, the caller made one of its holders. */
static lk_fn hold_loaded(const char *symbol, lm_llvm_object **held) {
  pthread_mutex_lock(&jit_lock);
  lm_llvm_object *o = table_find(symbol);
  if (o) o->holders++;
  pthread_mutex_unlock(&jit_lock);
  if (held) *held = o;
  return o ? o->fn : NULL;
}

/* ------------------------------------------------------------------ API */

void lm_llvm_symbol_name(const lk_kernel *k, char buf[36]) {
  lk_hash h = lk_kernel_hash(k);
  snprintf(buf, 36, "lk_%016" PRIx64 "%016" PRIx64, h.hi, h.lo);
}

loom_status lm_llvm_load_object(const void *obj, size_t objlen, const char *symbol, lk_fn *out_fn,
                                lm_llvm_object **held, char *err, size_t errlen) {
  *out_fn = NULL;
  if (held) *held = NULL;
  if (!obj || !symbol || !objlen) {
    lm_set_err(err, errlen, "lm_llvm_load_object: no object or symbol");
    return LOOM_ERR_COMPILE;
  }
  lk_fn fn = hold_loaded(symbol, held);
  if (fn) {
    *out_fn = fn;
    return LOOM_OK;
  }
  LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(obj, objlen, symbol);
  if (!buf) {
    lm_set_err(err, errlen, "kernel %s: out of memory copying the object", symbol);
    return LOOM_ERR_OOM;
  }
  return load_buffer(buf, symbol, out_fn, held, err, errlen);
}

bool lm_llvm_release(lm_llvm_object *o) {
  if (!o) return false;
  pthread_mutex_lock(&jit_lock);
  bool last = --o->holders == 0;
  if (last) {
    table_remove(o);
    object_free(o);
  }
  pthread_mutex_unlock(&jit_lock);
  return last;
}

size_t lm_llvm_objects_loaded(void) {
  pthread_mutex_lock(&jit_lock);
  size_t n = table_len;
  pthread_mutex_unlock(&jit_lock);
  return n;
}

/* *obj = a malloc'd copy of buf (consumed). */
static loom_status copy_object(LLVMMemoryBufferRef buf, const char *symbol, void **obj,
                               size_t *objlen, char *err, size_t errlen) {
  size_t n = LLVMGetBufferSize(buf);
  void *copy = malloc(n ? n : 1);
  if (!copy) {
    LLVMDisposeMemoryBuffer(buf);
    lm_set_err(err, errlen, "kernel %s: out of memory copying the object", symbol);
    return LOOM_ERR_OOM;
  }
  memcpy(copy, LLVMGetBufferStart(buf), n);
  LLVMDisposeMemoryBuffer(buf);
  *obj = copy;
  *objlen = n;
  return LOOM_OK;
}

loom_status lm_llvm_emit_object(const lk_kernel *k, const char *symbol, void **obj, size_t *objlen,
                                char *err, size_t errlen) {
  *obj = NULL;
  *objlen = 0;
  LLVMMemoryBufferRef buf = NULL;
  loom_status st = lm_emit_object_buffer(k, symbol, &buf, err, errlen);
  return st == LOOM_OK ? copy_object(buf, symbol, obj, objlen, err, errlen) : st;
}

void lm_llvm_gemm_symbol_name(const lk_gemm *d, char buf[36]) {
  lk_hash h = lk_gemm_hash(d);
  snprintf(buf, 36, "lg_%016" PRIx64 "%016" PRIx64, h.hi, h.lo);
}

loom_status lm_llvm_emit_gemm_object(const lk_gemm *d, const char *symbol, void **obj,
                                     size_t *objlen, char *err, size_t errlen) {
  *obj = NULL;
  *objlen = 0;
  LLVMMemoryBufferRef buf = NULL;
  loom_status st = lm_emit_gemm_object_buffer(d, symbol, &buf, err, errlen);
  return st == LOOM_OK ? copy_object(buf, symbol, obj, objlen, err, errlen) : st;
}

loom_status lm_llvm_compile(const lk_kernel *k, lk_fn *out_fn, char *err, size_t errlen) {
  *out_fn = NULL;
  char symbol[36] = "lk_(unhashable)";
  /* Hashing reads every instruction: only name kernels whose array exists. */
  if (k && (k->inst || k->ninst <= 0)) lm_llvm_symbol_name(k, symbol);
  const char *bad = lk_kernel_check(k);
  if (bad) {
    lm_set_err(err, errlen, "kernel %s is invalid: %s", symbol, bad);
    return LOOM_ERR_COMPILE;
  }
  lk_fn fn = hold_loaded(symbol, NULL);
  if (fn) {
    *out_fn = fn;
    return LOOM_OK;
  }
  /* Compile outside the lock: other threads keep compiling and loading. */
  LLVMMemoryBufferRef buf = NULL;
  loom_status st = lm_emit_object_buffer(k, symbol, &buf, err, errlen);
  if (st != LOOM_OK) return st;
  return load_buffer(buf, symbol, out_fn, NULL, err, errlen);
}

void lm_llvm_shutdown(void) {
  pthread_mutex_lock(&jit_lock);
  for (size_t i = 0; i < table_cap; i++) /* the trackers' handles; the JIT frees the code */
    if (table[i]) LLVMOrcReleaseResourceTracker(table[i]->tracker);
  if (jit) LLVMConsumeError(LLVMOrcDisposeLLJIT(jit));
  jit = NULL;
  table_free();
  pthread_mutex_unlock(&jit_lock);
}
