/*
 * Running plans on a CUDA device (runtime/cuda.h).
 *
 * Compiling: each kernel step's CUDA C (cuda_codegen.c) and each GEMM
 * step's tiled kernel (cuda_gemm.c) is compiled by NVRTC for the device's
 * compute capability into a cubin, loaded with cuModuleLoadData, through the
 * pipeline the CPU's kernels take too (runtime/compile.h). Loaded functions
 * are cached in memory per device (bounded as the CPU's: a module the cache
 * evicted is unloaded once no program runs it, after the device's stream
 * finishes) and cubins on disk (runtime/disk_cache.c) under
 *   cuda | <kernel name> | codegen version | NVRTC version | sm | loom version
 * An entry the driver refuses is removed and compiled again.
 *
 * Running: every step is queued on the device's stream; nothing waits here.
 * Philox keys are data on the host: a run copies the ones its kernels read
 * into one device buffer first. A GEMM with a deferred epilogue runs as one
 * kernel with it (lm_cuda_gemm_epilogue_source): the tiled product, and the
 * epilogue's value stored at each of its points; the product never goes to
 * memory (on the CPU the epilogue runs over cached row blocks).
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "backends/nvrtc/nvrtc_backend.h"
#include "base/cache.h"
#include "ops/scan/scan_cuda.h"
#include "runtime/check_step.h"
#include "runtime/compile.h"
#include "runtime/cuda.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/cuda_internal.h"
#include "runtime/disk_cache.h"
#include "runtime/gemm.h"
#include "runtime/pool.h"
#include "runtime/runtime.h"
#include "runtime/sort_step.h"

#ifndef LOOM_CODEGEN_ID /* CMakeLists.txt defines it for this file */
#error "LOOM_CODEGEN_ID (a hash of the code generators' sources) is not defined"
#endif

bool lm_cuda_ready(char *why, size_t whylen) {
  return lm_cu_ready(why, whylen) && lm_nvrtc_available(why, whylen);
}

int lm_cuda_count(void) { return lm_cu_device_count(); }

double lm_cuda_peak_gbs(int dev) {
  const lm_cu_device *d = lm_cu_device_at(dev);
  return d ? d->peak_gbs : 0;
}

/* A loaded function, how to launch it, and the module it came in. */
typedef struct cuda_code {
  CUfunction fn;
  lm_cuda_launch launch; /* kernels */
  char name[40];
  CUmodule module;
  int dev;
} cuda_code;

static _Atomic int64_t modules_loaded;

size_t lm_cuda_modules_loaded(void) { return (size_t)atomic_load(&modules_loaded); }

/* Loaded functions by (name, device): the design's kernel cache, on CUDA. */
static lm_cache codes = LM_CODE_CACHE_INIT;

static lm_hash128 memory_key(const char *name, int dev) {
  char text[64];
  int n = snprintf(text, sizeof text, "%s|%d", name, dev);
  XXH128_hash_t h = XXH3_128bits(text, (size_t)n);
  return (lm_hash128){h.low64, h.high64};
}

static lm_hash128 disk_key(const char *name, int sm) {
  char ident[256];
  int major = 0, minor = 0;
  lm_nvrtc_version(&major, &minor);
  snprintf(ident, sizeof ident, "cuda|%s|cg%s|nvrtc%d.%d|sm_%d", name, LOOM_CODEGEN_ID, major,
           minor, sm);
  return lm_disk_key_text(ident);
}

/* Loads a cubin and finds its function: CUDA_SUCCESS or the driver's error. */
static CUresult load(const void *cubin, cuda_code *c) {
  const lm_cu_api *cu = lm_cu();
  CUresult r = cu->module_load_data(&c->module, cubin);
  if (r != 0) return r;
  r = cu->module_get_function(&c->fn, c->module, c->name);
  if (r != 0) {
    cu->module_unload(c->module);
    return r;
  }
  atomic_fetch_add(&modules_loaded, 1);
  return r;
}

/* Once no program runs the code: the device's stream finishes what it has
 * queued (launches of it among them), then the module goes. */
static void unload(void *handle) {
  cuda_code *c = handle;
  CUstream stream = NULL;
  if (lm_cuda_enter("loom_realize", c->dev, &stream) == LOOM_OK) {
    const lm_cu_api *cu = lm_cu();
    cu->stream_synchronize(stream);
    if (cu->module_unload(c->module) == 0) {
      atomic_fetch_sub(&modules_loaded, 1);
      lm_stat_add(LM_STAT_KERNELS_UNLOADED, 1);
    }
  }
  free(c);
}

/* The code for a name on one device, through the shared pipeline (runtime/compile.h):
 * its source (and launch shape) made on a miss, compiled by NVRTC for the
 * device, loaded as a module. */
typedef loom_status (*source_fn)(const void *ctx, char **source, cuda_code *c, char *err,
                                 size_t errlen);

typedef struct cuda_build {
  int dev, sm;
  source_fn make;
  const void *make_ctx;
  char *source;
  cuda_code made; /* name and launch shape, then the function */
} cuda_build;

static loom_status cuda_prepare(void *ctx, char *err, size_t errlen) {
  cuda_build *b = ctx;
  return b->make(b->make_ctx, &b->source, &b->made, err, errlen);
}

static loom_status cuda_compile(void *ctx, void **bin, size_t *len, char *err, size_t errlen) {
  cuda_build *b = ctx;
  char log[4096];
  loom_status st =
      lm_nvrtc_compile(b->source, b->made.name, b->sm, (char **)bin, len, log, sizeof log);
  if (st != LOOM_OK)
    snprintf(err, errlen, "compiling %s for sm_%d failed: %s", b->made.name, b->sm, log);
  return st;
}

static loom_status cuda_load(void *ctx, const void *bin, size_t len, lm_loaded *out, char *err,
                             size_t errlen) {
  (void)len;
  cuda_build *b = ctx;
  b->made.dev = b->dev;
  CUresult r = load(bin, &b->made);
  if (r != 0) {
    char text[256];
    snprintf(err, errlen, "loading %s on cuda:%d failed with %s", b->made.name, b->dev,
             lm_cu_error_text(r, text, sizeof text));
    return lm_cu_status(r);
  }
  cuda_code *c = malloc(sizeof *c);
  if (!c) {
    lm_cu()->module_unload(b->made.module);
    atomic_fetch_sub(&modules_loaded, 1);
    snprintf(err, errlen, "out of memory");
    return LOOM_ERR_OOM;
  }
  *c = b->made;
  *out = (lm_loaded){c, c};
  return LOOM_OK;
}

static const lm_code_backend cuda_backend = {cuda_prepare, cuda_compile, cuda_load, unload};

/* The cached code for name on dev, or compiled from make(ctx)'s source. */
static loom_status find_code(int dev, const char *name, source_fn make, const void *ctx,
                             lm_code **out, lm_stat *how) {
  const lm_cu_device *d = lm_cu_device_at(dev);
  cuda_build b = {dev, d->sm, make, ctx, NULL, {0}};
  loom_status st = lm_code_get("loom_realize", &codes, memory_key(name, dev), disk_key(name, d->sm),
                               &cuda_backend, &b, out, how);
  free(b.source);
  return st;
}

static loom_status kernel_source(const void *ctx, char **source, cuda_code *c, char *err,
                                 size_t errlen) {
  char name[36];
  loom_status st = lm_cuda_source(ctx, source, name, &c->launch, err, errlen);
  memcpy(c->name, name, sizeof name);
  return st;
}

static loom_status gemm_source(const void *ctx, char **source, cuda_code *c, char *err,
                               size_t errlen) {
  const lm_gemm *g = ctx;
  return lm_cuda_gemm_source(g->dtype, g->a_trans, g->b_trans, source, c->name, err, errlen);
}

/* A library step's kernel (attention, its backward, sort, scan): ctx points
 * to the function making its source; its step launches it. */
static loom_status library_source(const void *ctx, char **source, cuda_code *c, char *err,
                                  size_t errlen) {
  const lm_cuda_library_source *make = ctx;
  c->launch = (lm_cuda_launch){LM_CUDA_ELEMENTWISE, LM_CUDA_BLOCK, 0}; /* launched by its step */
  return (*make)(source, c->name, err, errlen);
}

loom_status lm_cuda_library_code(int dev, const char *name, lm_cuda_library_source make,
                                 lm_code **code) {
  return find_code(dev, name, library_source, &make, code, NULL);
}

/* A kernel step with its deferred GEMM fused in. */
typedef struct fused_ctx {
  const lk_kernel *kernel; /* the step's, or the generic one serving it */
  int gemm_slot;
  const lm_gemm *gemm;
} fused_ctx;

static loom_status fused_source(const void *ctx, char **source, cuda_code *c, char *err,
                                size_t errlen) {
  const fused_ctx *f = ctx;
  char name[36];
  loom_status st =
      lm_cuda_gemm_epilogue_source(f->kernel, f->gemm_slot, f->gemm->dtype, f->gemm->a_trans,
                                   f->gemm->b_trans, source, name, err, errlen);
  memcpy(c->name, name, sizeof name);
  c->launch = (lm_cuda_launch){LM_CUDA_ELEMENTWISE, LM_CUDA_BLOCK, 0}; /* launched as a GEMM */
  return st;
}

int lm_cuda_max_sizes(void) { return LM_CUDA_MAX_SIZES; }

/* A GEMM step's code: lm_gemm_<dtype>_<nt>. */
static loom_status gemm_code(const lm_plan *p, lm_step *s, int dev, const unsigned char *vary) {
  (void)p, (void)vary;
  char name[40];
  snprintf(name, sizeof name, "lm_gemm_%s_%c%c", loom_dtype_name(s->gemm.dtype),
           s->gemm.a_trans ? 't' : 'n', s->gemm.b_trans ? 't' : 'n');
  return find_code(dev, name, gemm_source, &s->gemm, &s->code, NULL);
}

static loom_status attention_code(const lm_plan *p, lm_step *s, int dev,
                                  const unsigned char *vary) {
  (void)p, (void)vary;
  if (s->attn.backward)
    return lm_cuda_library_code(dev, "lm_attention_grad_f32", lm_cuda_attention_grad_source,
                                &s->code);
  return lm_cuda_library_code(dev, "lm_attention_f32", lm_cuda_attention_source, &s->code);
}

static loom_status sort_code(const lm_plan *p, lm_step *s, int dev, const unsigned char *vary) {
  (void)p, (void)vary;
  return lm_cuda_library_code(dev, "lm_sort_rows", lm_cuda_sort_source, &s->code);
}

/* A kernel step's code: the shape-generic kernel serving it, when its shape
 * has one; with its deferred GEMM fused in, when it has one. vary: the sizes
 * a plan template's kernel reads at run time (NULL: as the shape records
 * say). */
static loom_status kernel_code(const lm_plan *p, lm_step *s, int dev, const unsigned char *vary) {
  lm_code **code = &s->code;
  char name[40];
  const lm_gemm *gm = s->gemm_partner >= 0 ? &p->steps[s->gemm_partner].gemm : NULL;
  lk_kernel generic;
  int64_t *sizes = NULL;
  loom_status st =
      vary ? lm_kernel_generic_lifted("loom_program_run", &s->kernel, vary, &generic, &sizes)
           : lm_kernel_generalized(&s->kernel, LM_GENERIC_CUDA, &generic, &sizes);
  if (st != LOOM_OK) return st;
  if (sizes && generic.nsizes > LM_CUDA_MAX_SIZES) { /* the template checked */
    free(generic.inst);
    free(sizes);
    return lm_fail(LOOM_ERR_INTERNAL,
                   "loom_program_run: a CUDA kernel reading %d sizes at run time (at most %d)",
                   generic.nsizes, LM_CUDA_MAX_SIZES);
  }
  const lk_kernel *k = sizes ? &generic : &s->kernel;
  lm_stat how;
  if (gm) { /* with its deferred GEMM fused in */
    fused_ctx f = {k, s->gemm_slot, gm};
    lm_cuda_gemm_epilogue_name(k, s->gemm_slot, gm->dtype, gm->a_trans, gm->b_trans, name);
    st = find_code(dev, name, fused_source, &f, code, &how);
  } else {
    lk_hash h = lk_kernel_hash(k);
    snprintf(name, sizeof name, "lk_%016" PRIx64 "%016" PRIx64, h.hi, h.lo);
    st = find_code(dev, name, kernel_source, k, code, &how);
  }
  if (sizes) {
    free(generic.inst);
    if (st == LOOM_OK) {
      lm_generic_counted(how);
      s->sizes = sizes, s->nsizes = generic.nsizes;
    } else {
      free(sizes);
    }
  }
  return st;
}

static loom_status step_code(const lm_plan *p, lm_step *s, int dev, const unsigned char *vary);
/* A program's CUDA code compiles on the pool's threads, one step at a time
 * each (NVRTC takes about 70 ms a kernel on an H200's host: GPT-2 124M's 41
 * steps were 2.9 s of its 4.1 s first step, one after another). A step that
 * fails is left without code; the caller compiles it again on its own thread,
 * where the error is reported. */
typedef struct cuda_compile_job {
  const lm_plan *p;
  int dev;
  unsigned char *const *vary;
  _Atomic int next;
} cuda_compile_job;

/* GCC 12's LeakSanitizer crashes at exit reading the thread-local storage
 * NVRTC leaves on a pool thread (its dynamic TLS ranges there are garbage), so
 * AddressSanitizer builds compile on the caller's thread alone. */
#if defined(__SANITIZE_ADDRESS__)
#define COMPILE_IN_PARALLEL 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define COMPILE_IN_PARALLEL 0
#endif
#endif
#ifndef COMPILE_IN_PARALLEL
#define COMPILE_IN_PARALLEL 1
#endif

static bool compiles(const lm_step *s);

static void compile_steps(void *ctx, int64_t begin, int64_t end) {
  (void)begin, (void)end;
  cuda_compile_job *j = ctx;
  if (lm_cuda_enter("loom_realize", j->dev, NULL) != LOOM_OK) return; /* modules load into it */
  for (int i; (i = atomic_fetch_add(&j->next, 1)) < j->p->nsteps;) {
    lm_step *s = &j->p->steps[i];
    if (compiles(s)) step_code(j->p, s, j->dev, j->vary ? j->vary[i] : NULL);
  }
}

loom_status lm_cuda_exec_compile(lm_plan *p, int dev, unsigned char *const *vary) {
  loom_status st = lm_cuda_enter("loom_realize", dev, NULL);
  if (st != LOOM_OK) return st;
  int ncompiled = 0;
  for (int i = 0; i < p->nsteps; i++) {
    if (lm_env_flag("LOOM_DEBUG") && p->steps[i].kind == LM_STEP_KERNEL)
      lk_kernel_print(&p->steps[i].kernel, stderr);
    ncompiled += compiles(&p->steps[i]);
  }
  cuda_compile_job job = {p, dev, vary, 0};
  int threads = loom_num_threads();
  if (COMPILE_IN_PARALLEL && ncompiled > 1) lm_parallel_for(threads, threads, compile_steps, &job);
  for (int i = 0; i < p->nsteps && st == LOOM_OK; i++) { /* failures again, reported here */
    lm_step *s = &p->steps[i];
    if (compiles(s) && !s->code) st = step_code(p, s, dev, vary ? vary[i] : NULL);
  }
  return st;
}

/* ------------------------------------------------------------------ launching */

/* Grid-stride kernels take any grid: beyond a few waves of blocks per
 * multiprocessor more blocks only cost scheduling. */
#define BLOCKS_PER_SM 32

/*
 * Every parameter is 8 bytes (a device pointer or a long long), passed by
 * address. The array ends with NULL: the driver reads as many entries as the
 * kernel has parameters, and a driver double (tests/support/fake_cuda.c) can
 * count them.
 */
static loom_status launch(const lm_exec *x, const cuda_code *c, unsigned gx, unsigned gy,
                          unsigned gz, uint64_t *values, int nvalues) {
  int dev = x->device.index;
  CUstream stream;
  loom_status st = lm_cuda_enter("loom_realize", dev, &stream);
  if (st != LOOM_OK) return st;
  void *params_small[40], **params = params_small;
  if (nvalues + 1 > 40 && !(params = malloc(sizeof(void *) * (size_t)(nvalues + 1))))
    return lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory launching %s", c->name);
  for (int i = 0; i < nvalues; i++) params[i] = &values[i];
  params[nvalues] = NULL;
  CUresult r =
      lm_cu()->launch_kernel(c->fn, gx, gy, gz, LM_CUDA_BLOCK, 1, 1, 0, stream, params, NULL);
  if (params != params_small) free(params);
  if (r != 0) {
    char text[256];
    return lm_fail(lm_cu_status(r),
                   "loom_realize: launching %s (grid %u x %u x %u) on cuda:%d failed "
                   "with %s",
                   c->name, gx, gy, gz, dev, lm_cu_error_text(r, text, sizeof text));
  }
  lm_stat_add(LM_STAT_KERNELS_LAUNCHED, 1);
  return LOOM_OK;
}

static uint64_t ptr_value(const void *p) { return lm_cuda_ptr(p); }

loom_status lm_cuda_launch_step(const lm_exec *x, const lm_step *s, unsigned grid, uint64_t *values,
                                int nvalues) {
  return launch(x, s->device_code, grid, 1, 1, values, nvalues);
}

/* A GEMM's batch dims as at most two, outer and inner, each with its stride
 * in A and in B (elements): adjacent dims merge where both operands step
 * through them as one. False when more than two remain. */
typedef struct gemm_batches {
  int64_t inner, sa[2], sb[2];
} gemm_batches;

static bool collapse_batches(const lm_gemm *g, gemm_batches *out) {
  int64_t n[LOOM_MAX_DIMS], sa[LOOM_MAX_DIMS], sb[LOOM_MAX_DIMS];
  int k = 0;
  for (int d = 0; d < g->nbatch; d++) {
    if (g->batch[d] == 1) continue;
    if (k > 0 && sa[k - 1] == g->a_bstride[d] * g->batch[d] &&
        sb[k - 1] == g->b_bstride[d] * g->batch[d]) {
      n[k - 1] *= g->batch[d], sa[k - 1] = g->a_bstride[d], sb[k - 1] = g->b_bstride[d];
      continue;
    }
    n[k] = g->batch[d], sa[k] = g->a_bstride[d], sb[k] = g->b_bstride[d];
    k++;
  }
  if (k > 2) return false;
  *out = (gemm_batches){1, {0, 0}, {0, 0}};
  if (k >= 1) out->inner = n[k - 1], out->sa[1] = sa[k - 1], out->sb[1] = sb[k - 1];
  if (k == 2) out->sa[0] = sa[0], out->sb[0] = sb[0];
  return true;
}

/* The GEMM kernels' parameters after their leading ones: a, b, M, N, K, lda,
 * ldb and the batch layout (backends/nvrtc/cuda_gemm.cu's LM_GEMM_PARAMS). */
#define GEMM_PARAMS 13

/* GEMM g's tiled kernel c over every batch index. v holds the kernel's `lead`
 * leading parameters (the output, or an epilogue's slots) and room for
 * GEMM_PARAMS more.
 * One launch covers up to LM_CUDA_GEMM_MAX_GRID_Z batch indices (before: one
 * launch each, 32 a step for the digits example's per-image augmentation);
 * batch dims that do not collapse to two launch per index, offset here. */
static loom_status launch_gemm(const lm_exec *x, const lm_gemm *g, const cuda_code *c, uint64_t *v,
                               int lead) {
  size_t es = loom_dtype_size(g->dtype);
  int64_t batches = lm_gemm_batches(g);
  if (g->M * g->N == 0 || batches == 0) return LOOM_OK;
  unsigned gx = (unsigned)((g->N + LM_CUDA_GEMM_TILE - 1) / LM_CUDA_GEMM_TILE);
  unsigned gy = (unsigned)((g->M + LM_CUDA_GEMM_TILE - 1) / LM_CUDA_GEMM_TILE);
  const char *a = x->bufs[g->a_pos], *b = x->bufs[g->b_pos];
  uint64_t *t = v + lead;
  t[2] = (uint64_t)g->M, t[3] = (uint64_t)g->N, t[4] = (uint64_t)g->K;
  t[5] = (uint64_t)g->lda, t[6] = (uint64_t)g->ldb;
  gemm_batches layout;
  bool together = collapse_batches(g, &layout);
  loom_status st = LOOM_OK;
  for (int64_t z0 = 0; z0 < batches && st == LOOM_OK;) {
    int64_t ao = g->a_offset, bo = g->b_offset, count = 1;
    if (together) {
      count = batches - z0 < LM_CUDA_GEMM_MAX_GRID_Z ? batches - z0 : LM_CUDA_GEMM_MAX_GRID_Z;
      t[8] = (uint64_t)layout.inner;
      t[9] = (uint64_t)layout.sa[0], t[10] = (uint64_t)layout.sa[1];
      t[11] = (uint64_t)layout.sb[0], t[12] = (uint64_t)layout.sb[1];
    } else {
      lm_gemm_batch_offsets(g, z0, &ao, &bo);
      t[8] = 1, t[9] = t[10] = t[11] = t[12] = 0;
    }
    t[0] = ptr_value(a + ao * (int64_t)es), t[1] = ptr_value(b + bo * (int64_t)es);
    t[7] = (uint64_t)z0;
    st = launch(x, c, gx, gy, (unsigned)count, v, lead + GEMM_PARAMS);
    lm_stat_add(LM_STAT_GEMM_CALLS, 1);
    z0 += count;
  }
  return st;
}

/* The product into the step's output (contiguous [batch.., M, N]). */
static loom_status gemm_step(const lm_exec *x, const lm_step *s) {
  uint64_t v[1 + GEMM_PARAMS] = {ptr_value(x->bufs[s->out])};
  return launch_gemm(x, &s->gemm, s->device_code, v, 1);
}

static loom_status launch_kernel(const lm_exec *x, const lm_step *s, uint64_t *v) {
  const cuda_code *c = s->device_code;
  int n = s->kernel.nslots;
  for (int z = 0; z < s->nsizes; z++) v[n++] = (uint64_t)s->sizes[z]; /* after the slots */
  int64_t points = s->outer, per = c->launch.points_per_block;
  if (per == 0) per = s->kernel.dom[s->kernel.ndim - 1]; /* rows of run-time length */
  int64_t blocks = (points + per - 1) / per, cap = BLOCKS_PER_SM;
  const lm_cu_device *d = lm_cu_device_at(x->device.index);
  if (d && d->multiprocessors > 0) cap *= d->multiprocessors;
  if (blocks > cap) blocks = cap;
  v[n] = 0;                      /* begin */
  v[n + 1] = (uint64_t)s->outer; /* end */
  return launch(x, c, (unsigned)blocks, 1, 1, v, n + 2);
}

/* A kernel step: its slots' device pointers, then begin and end; fused with
 * its deferred GEMM, the tiled product and the kernel's value at each of its
 * points (cuda_codegen.c), the product never in memory. */
static loom_status kernel_step(const lm_exec *x, const lm_step *s) {
  if (s->outer == 0) return LOOM_OK;
  int n = s->kernel.nslots;
  /* the slots, a generic kernel's sizes, then begin and end or the GEMM's parameters */
  int room = n + s->nsizes + GEMM_PARAMS;
  uint64_t small[32], *v = room <= 32 ? small : malloc(sizeof(uint64_t) * (size_t)room);
  if (!v) return lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory");
  v[0] = ptr_value(x->bufs[s->out]);
  for (int a = 1; a < n; a++) {
    int pos = s->arg_pos[a];
    if (pos == LM_PARAMS_SLOT) { /* lowering binds parameters on the CPU only */
      if (v != small) free(v);
      return lm_fail(LOOM_ERR_INTERNAL, "loom_realize: a CUDA kernel with host parameters");
    }
    v[a] = ptr_value(s->arg_key[a] ? x->keys[pos] : x->bufs[pos]);
  }
  loom_status st;
  if (s->gemm_partner >= 0) { /* the product never goes to memory */
    v[s->gemm_slot] = 0;
    for (int z = 0; z < s->nsizes; z++) v[n + z] = (uint64_t)s->sizes[z]; /* after the slots */
    st = launch_gemm(x, &x->plan->steps[s->gemm_partner].gemm, s->device_code, v, n + s->nsizes);
  } else {
    st = launch_kernel(x, s, v);
  }
  if (v != small) free(v);
  return st;
}

/* Fused attention (cuda_attention.cu's kernel): its buffers and numbers, one
 * block per `rows` query rows of a batch index (8; for fewer queries, as
 * decoding's one, the fewest power of two holding them, so the block's spare
 * warps split the keys), up to BLOCKS_PER_SM per multiprocessor (the kernel
 * strides over the rest). */
/* The operands' layouts as the attention kernels take them: `operands`
 * offsets, then their row strides, the 6 batch sizes, and per operand its 6
 * batch strides. */
static int attention_layout(const lm_attention *a, int operands, uint64_t *v, int n) {
  for (int k = 0; k < operands; k++) v[n++] = (uint64_t)a->offset[k];
  for (int k = 0; k < operands; k++) v[n++] = (uint64_t)a->row_stride[k];
  for (int d = 0; d < 6; d++) v[n++] = (uint64_t)(d < a->nbatch ? a->batch[d] : 1);
  for (int k = 0; k < operands; k++)
    for (int d = 0; d < 6; d++) v[n++] = (uint64_t)(d < a->nbatch ? a->bstride[k][d] : 0);
  return n;
}

/* Blocks for `items` work items: up to BLOCKS_PER_SM per multiprocessor (the
 * kernels stride over the rest). */
unsigned lm_cuda_grid_for(const lm_exec *x, int64_t items) {
  int64_t cap = BLOCKS_PER_SM;
  const lm_cu_device *dev = lm_cu_device_at(x->device.index);
  if (dev && dev->multiprocessors > 0) cap *= dev->multiprocessors;
  return (unsigned)(items < cap ? items : cap);
}

/* Attention's backward (cuda_attention_grad.cu's lm_attention_grad_f32): phase 0
 * over query rows (dq, and each row's log-sum-exp and delta into scratch),
 * then phase 1 over key rows (dk, dv), each 8 rows a block over the rows of
 * the output's [.., 3, T, W] parts. */
static loom_status attention_grad_step(const lm_exec *x, const lm_step *s) {
  const lm_attention *a = &s->attn;
  int64_t batch = 1, t = a->tq > a->tk ? a->tq : a->tk, w = a->d > a->dv ? a->d : a->dv;
  for (int d = 0; d < a->nbatch; d++) batch *= a->batch[d];
  size_t bytes = sizeof(float) * 2 * (size_t)(batch * a->tq);
  void *stats = NULL;
  loom_status st = lm_cuda_alloc("loom_realize", x->device.index, bytes ? bytes : 1, &stats);
  if (st != LOOM_OK) return st;
  uint64_t v[96];
  int n = 1; /* v[0]: the phase */
  v[n++] = ptr_value(x->bufs[s->out]);
  for (int k = 0; k < 3; k++) v[n++] = ptr_value(x->bufs[a->pos[k]]);
  v[n++] = a->mask ? ptr_value(x->bufs[a->pos[3]]) : 0;
  v[n++] = ptr_value(x->bufs[a->pos[4]]);
  v[n++] = ptr_value(x->bufs[a->pos[5]]);
  v[n++] = ptr_value(stats);
  memcpy(&v[n++], &a->scale, sizeof a->scale);
  int64_t items = batch * ((t + 7) / 8);
  const int64_t head[] = {a->nbatch, a->tq,          a->tk, a->d, a->dv, a->causal,
                          a->mask,   a->mask_stride, items, t,    w};
  for (size_t i = 0; i < sizeof head / sizeof *head; i++) v[n++] = (uint64_t)head[i];
  n = attention_layout(a, LM_ATTENTION_OPERANDS, v, n);
  for (uint64_t phase = 0; phase < 2 && st == LOOM_OK; phase++) {
    v[0] = phase;
    st = launch(x, s->device_code, lm_cuda_grid_for(x, items), 1, 1, v, n);
  }
  lm_cuda_free(x->device.index, stats, bytes ? bytes : 1); /* reused only behind these */
  return st;
}

static loom_status attention_step(const lm_exec *x, const lm_step *s) {
  const lm_attention *a = &s->attn;
  if (s->outer == 0) return LOOM_OK;
  if (a->backward) return attention_grad_step(x, s);
  uint64_t v[64];
  int n = 0;
  v[n++] = ptr_value(x->bufs[s->out]);
  for (int k = 0; k < 3; k++) v[n++] = ptr_value(x->bufs[a->pos[k]]);
  v[n++] = a->mask ? ptr_value(x->bufs[a->pos[3]]) : 0;
  memcpy(&v[n++], &a->scale, sizeof a->scale);
  int64_t rows = 8;
  while (rows > 1 && rows / 2 >= a->tq) rows /= 2;
  int64_t items = (a->tq + rows - 1) / rows;
  for (int d = 0; d < a->nbatch; d++) items *= a->batch[d];
  const int64_t head[] = {a->nbatch, a->tq,   a->tk,          a->d,  a->dv,
                          a->causal, a->mask, a->mask_stride, items, rows};
  for (size_t i = 0; i < sizeof head / sizeof *head; i++) v[n++] = (uint64_t)head[i];
  n = attention_layout(a, 4, v, n);
  return launch(x, s->device_code, lm_cuda_grid_for(x, items), 1, 1, v, n);
}

/* A sort (cuda_sort.c's kernel): a block per LM_CUDA_BLOCK values of a row,
 * up to BLOCKS_PER_SM per multiprocessor (the kernel strides over the rest). */
static loom_status sort_step(const lm_exec *x, const lm_step *s) {
  const lm_sort *so = &s->sort;
  loom_status st = lm_sort_check(so);
  if (st != LOOM_OK || s->outer == 0) return st;
  uint64_t v[] = {ptr_value(x->bufs[s->out]),
                  ptr_value(x->bufs[so->in_pos]),
                  (uint64_t)so->n,
                  (uint64_t)so->k,
                  (uint64_t)so->dtype,
                  so->descending,
                  (uint64_t)so->rows};
  int64_t items = so->rows * ((so->n + LM_CUDA_BLOCK - 1) / LM_CUDA_BLOCK);
  return launch(x, s->device_code, lm_cuda_grid_for(x, items), 1, 1, v,
                (int)(sizeof v / sizeof *v));
}

/* A check (runtime/check_cpu.c) on the host: the source copied down (which
 * waits for the steps before it), checked, then copied into the output on
 * the device. Checked here, before any later step is queued, a failing run
 * stops where the CPU's does: nothing after it runs, a KV cache updated in
 * place later in the run among them. Its sources are token ids, positions
 * and labels (a few bytes) or multinomial's weights. */
static loom_status check_step(const lm_exec *x, const lm_step *s) {
  const char *op = "loom_realize";
  size_t bytes = (size_t)s->outer * loom_dtype_size(s->dtype);
  void *host = malloc(bytes + 1);
  if (!host) return lm_fail(LOOM_ERR_OOM, "%s: out of memory for a check's %zu bytes", op, bytes);
  const void *in = x->bufs[s->check.in_pos];
  loom_status st = lm_cuda_copy(op, LOOM_CPU, host, x->device, in, bytes);
  if (st == LOOM_OK) st = lm_check_host(&s->check, host);
  free(host);
  if (st == LOOM_OK) st = lm_cuda_copy(op, x->device, x->bufs[s->out], x->device, in, bytes);
  return st;
}

/* How a CUDA device runs each kind of step (runtime/step_kinds.h has the
 * CPU's), in lm_step_kind's order; a library op in a folder of its own has
 * its row there (ops/<op>/<op>_cuda.c). */
static const lm_cuda_step_kind kernel_kind = {kernel_step, kernel_code};
static const lm_cuda_step_kind gemm_kind = {gemm_step, gemm_code};
static const lm_cuda_step_kind attention_kind = {attention_step, attention_code};
static const lm_cuda_step_kind sort_kind = {sort_step, sort_code};
static const lm_cuda_step_kind check_kind = {check_step, NULL}; /* on the host */
static const lm_cuda_step_kind collective_kind = {NULL, NULL};  /* runtime/exec.c's */
static const lm_cuda_step_kind *const cuda_step_kinds[] = {
    &kernel_kind,       &gemm_kind,  &attention_kind,  &sort_kind,
    &lm_scan_cuda_kind, &check_kind, &collective_kind,
};
_Static_assert(sizeof cuda_step_kinds / sizeof *cuda_step_kinds == LM_STEP_KINDS,
               "every lm_step_kind has its row in cuda_step_kinds, in the enum's order");

static bool compiles(const lm_step *s) { return cuda_step_kinds[s->kind]->code != NULL; }

static loom_status step_code(const lm_plan *p, lm_step *s, int dev, const unsigned char *vary) {
  const lm_gemm *gm = s->kind == LM_STEP_GEMM ? &s->gemm
                      : s->kind == LM_STEP_KERNEL && s->gemm_partner >= 0
                          ? &p->steps[s->gemm_partner].gemm
                          : NULL;
  if (gm && gm->in_dtype != gm->dtype) /* the frontend widens them for CUDA */
    return lm_fail(LOOM_ERR_DTYPE,
                   "loom_realize: CUDA's GEMM takes F32 or F64 operands, not %s (a product "
                   "recorded for the CPU; cast the operands to F32 first)",
                   loom_dtype_name(gm->in_dtype));
  loom_status st = cuda_step_kinds[s->kind]->code(p, s, dev, vary);
  s->device_code = st == LOOM_OK ? lm_code_fn(s->code) : NULL;
  return st;
}

static loom_status cuda_step(const lm_exec *x, const lm_step *s) {
  return cuda_step_kinds[s->kind]->run(x, s);
}

/* The Philox keys the kernels read, copied to the device: keys[pos] becomes
 * a device pointer to the two words. */
static loom_status upload_keys(const lm_exec *x, void **dkeys, void **buf, size_t *bytes) {
  const lm_plan *p = x->plan;
  int n = p->nnodes;
  bool any = false;
  for (int i = 0; i < p->nsteps && !any; i++)
    for (int a = 1; p->steps[i].kind == LM_STEP_KERNEL && a < p->steps[i].kernel.nslots; a++)
      any |= p->steps[i].arg_key[a];
  *buf = NULL, *bytes = 0;
  if (!any) return LOOM_OK;
  uint32_t *host = calloc((size_t)n, 2 * sizeof(uint32_t));
  if (!host) return lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory");
  for (int pos = 0; pos < n; pos++)
    if (x->keys[pos]) memcpy(host + 2 * pos, x->keys[pos], 2 * sizeof(uint32_t));
  *bytes = (size_t)n * 2 * sizeof(uint32_t);
  loom_status st = lm_cuda_alloc("loom_realize", x->device.index, *bytes, buf);
  if (st == LOOM_OK) st = lm_cuda_copy("loom_realize", x->device, *buf, LOOM_CPU, host, *bytes);
  free(host);
  for (int pos = 0; pos < n && st == LOOM_OK; pos++)
    dkeys[pos] = x->keys[pos] ? (char *)*buf + 8 * (size_t)pos : NULL;
  return st;
}

loom_status lm_cuda_exec_run(const lm_exec *x) {
  int n = x->plan->nnodes;
  void **dkeys = calloc((size_t)(n > 0 ? n : 1), sizeof *dkeys);
  if (!dkeys) return lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory");
  void *keybuf = NULL;
  size_t keybytes = 0;
  loom_status st = upload_keys(x, dkeys, &keybuf, &keybytes);
  if (st == LOOM_OK) {
    lm_exec y = *x;
    y.keys = dkeys;
    st = lm_exec_steps(&y, cuda_step);
  }
  lm_cuda_free(x->device.index, keybuf, keybytes); /* reused only behind this run's kernels */
  free(dkeys);
  return st;
}
