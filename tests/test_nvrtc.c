/*
 * The CUDA code generator without a GPU: every kernel a broad set of graphs
 * plans into (fused and unfused) is printed as CUDA C and compiled by NVRTC
 * for sm_80 and sm_90; any compile error fails with the kernel's listing and
 * NVRTC's log. Also: the generated Philox text, compiled here as C, against
 * base/philox.h bit for bit; coverage of every kernel op, reduction and
 * cast; a look at the PTX of a few kernels (vector loads, shuffles, mulhi).
 *
 * Without NVRTC (no toolkit installed) the NVRTC part prints SKIP and passes.
 * An internal test: it reaches the planner (passes/) and the handles' nodes.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/nvrtc/nvrtc_backend.h"
#include "base/philox.h"
#include "check.h"
#include "loom.h"
#include "ops/scan/scan_nvrtc.h"
#include "passes/passes.h"
#include "runtime/runtime.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------ Philox on the host */

/* The device's __umulhi, and the prelude's Philox (cuda_philox.cuh, its
 * constants base/philox.h's) compiled as C. */
#define LM_CUDA_PRELUDE
#define LM_DEV static inline
static unsigned int lm_mulhi(unsigned int a, unsigned int b) {
  return (unsigned int)(((unsigned long long)a * b) >> 32);
}
#include "backends/nvrtc/cuda_philox.cuh"
#undef LM_DEV

static void test_philox_text(void) {
  /* Random123's known answers for Philox4x32-10 */
  static const uint32_t kat[3][7] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5},
      {~0u, ~0u, ~0u, ~0u, ~0u, ~0u, 0x408f276d},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09},
  };
  static const uint32_t kat_rest[3][3] = {{0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
                                          {0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
                                          {0x94fdcceb, 0x5001e420, 0x24126ea1}};
  for (int t = 0; t < 3; t++) {
    const uint32_t *v = kat[t];
    unsigned int out[4];
    lm_philox_block(v[0], v[1], v[2], v[3], v[4], v[5], out);
    CHECK_MSG(out[0] == v[6] && out[1] == kat_rest[t][0] && out[2] == kat_rest[t][1] &&
                  out[3] == kat_rest[t][2],
              "Philox known answer %d: got %08x %08x %08x %08x", t, out[0], out[1], out[2], out[3]);
  }
  /* the draws of LK_RAND: counter layout, stream, key, float conversion */
  uint64_t state = 0x9e3779b97f4a7c15ull;
  int mismatches = 0;
  for (int i = 0; i < 100000; i++) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t key[2] = {(uint32_t)(state >> 32), (uint32_t)state};
    uint64_t counter = i < 50000 ? (uint64_t)i : state >> (i % 40);
    uint32_t stream = (uint32_t)(i % 3);
    float f = lm_philox_f32(key[0], key[1], counter, stream);
    double d = lm_philox_f64(key[0], key[1], counter, stream);
    float rf = lm_philox_uniform_f32(key, counter, stream);
    double rd = lm_philox_uniform_f64(key, counter, stream);
    if (memcmp(&f, &rf, sizeof f) != 0 || memcmp(&d, &rd, sizeof d) != 0) mismatches++;
  }
  CHECK_MSG(mismatches == 0, "%d of 100000 generated Philox draws differ from base/philox.h",
            mismatches);
  /* the prelude carries this very file */
  FILE *f = fopen(LOOM_SOURCE_DIR "/backends/nvrtc/cuda_philox.cuh", "rb");
  CHECK_MSG(f != NULL, "cannot open backends/nvrtc/cuda_philox.cuh");
  char text[8192];
  size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
  if (f) fclose(f);
  text[n] = 0;
  CHECK(n > 0 && n < sizeof text - 1 && strstr(lm_cuda_prelude(), text) != NULL);
  CHECK(strstr(lm_cuda_prelude(), "__umulhi(a, b)") != NULL);
}

/* ------------------------------------------------------------------ kernels collected */

typedef struct job {
  char name[36];
  char *source;
  char *listing;
  const char *label;
  lm_cuda_launch launch;
} job;

static job *jobs;
static int njobs, jobs_cap, duplicates;
static bool op_seen[LK_NUM_OPS], reduce_seen[LK_RED_LSE + 1], mode_seen[LM_CUDA_ROWS + 1];
static bool cast_seen[LOOM_NUM_DTYPES][LOOM_NUM_DTYPES];

static char *listing_of(const lk_kernel *k) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return NULL;
  lk_kernel_print(k, f);
  fclose(f);
  return text;
}

static void note_coverage(const lk_kernel *k, const lm_cuda_launch *launch) {
  for (int i = 0; i < k->ninst; i++) {
    const lk_inst *in = &k->inst[i];
    op_seen[in->op] = true;
    if (in->op == LK_CAST) cast_seen[k->inst[in->a].dtype][in->dtype] = true;
  }
  reduce_seen[k->reduce] = true;
  mode_seen[launch->mode] = true;
}

/* Queues the job named `name`, taking `source`; false (the source freed, the
 * duplicate counted) when a job of that name is queued already. The listing
 * is k's, when there is a kernel. */
static bool queue_job(const char *name, char *source, const lk_kernel *k, const char *label,
                      lm_cuda_launch launch) {
  for (int i = 0; i < njobs; i++)
    if (strcmp(jobs[i].name, name) == 0) {
      duplicates++;
      free(source);
      return false;
    }
  if (njobs == jobs_cap) {
    jobs_cap = jobs_cap ? 2 * jobs_cap : 256;
    jobs = realloc(jobs, (size_t)jobs_cap * sizeof *jobs);
    if (!jobs) abort();
  }
  job *j = &jobs[njobs++];
  snprintf(j->name, sizeof j->name, "%s", name);
  j->source = source;
  j->listing = k ? listing_of(k) : NULL;
  j->label = label;
  j->launch = launch;
  return true;
}

static int kept_kernels; /* updates in place (keep_slot): only the new points stored */
static void add_kernel(const char *label, const lk_kernel *k) {
  char *src = NULL, name[36], err[512];
  lm_cuda_launch launch;
  loom_status st = lm_cuda_source(k, &src, name, &launch, err, sizeof err);
  CHECK_MSG(st == LOOM_OK, "%s: lm_cuda_source: %s", label, err);
  if (st != LOOM_OK) return;
  const char *prelude = lm_cuda_prelude();
  CHECK_MSG(strncmp(src, prelude, strlen(prelude)) == 0, "%s: %s does not start with the prelude",
            label, name);
  note_coverage(k, &launch);
  kept_kernels += k->keep_slot != 0;
  queue_job(name, src, k, label, launch);
}

/* A deferred GEMM with its epilogue kernel fused into the tiled kernel. */
static int fused_epilogues;
static void add_fused(const char *label, const lk_kernel *k, int slot, const lm_gemm *gm) {
  char *src = NULL, name[36], err[512];
  loom_status st = lm_cuda_gemm_epilogue_source(k, slot, gm->dtype, gm->a_trans, gm->b_trans, &src,
                                                name, err, sizeof err);
  CHECK_MSG(st == LOOM_OK, "%s: lm_cuda_gemm_epilogue_source: %s", label, err);
  if (st != LOOM_OK) return;
  lm_cuda_launch launch = {LM_CUDA_ELEMENTWISE, LM_CUDA_BLOCK, 0};
  if (queue_job(name, src, k, "gemm epilogue", launch)) fused_epilogues++;
}

/* The GEMM kernels of LM_STEP_GEMM (F32, F64, each transpose), behind the
 * prelude so that they batch with the rest. */
static void add_gemm_kernels(void) {
  for (int dt = LOOM_F32; dt <= LOOM_F64; dt++)
    for (int t = 0; t < 4; t++) {
      char *src = NULL, name[40], err[512];
      loom_status st = lm_cuda_gemm_source(dt, t & 1, t & 2, &src, name, err, sizeof err);
      CHECK_MSG(st == LOOM_OK, "gemm: %s", err);
      if (st != LOOM_OK) continue;
      size_t pre = strlen(lm_cuda_prelude()), n = strlen(src);
      char *full = malloc(pre + n + 1);
      if (!full) abort();
      memcpy(full, lm_cuda_prelude(), pre);
      memcpy(full + pre, src, n + 1);
      free(src);
      /* "lm_gemm_f64_tt" fits; each name comes once */
      queue_job(name, full, NULL, "gemm", (lm_cuda_launch){LM_CUDA_ELEMENTWISE, LM_CUDA_BLOCK, 0});
    }
}

static void add_library_kernel(const char *label,
                               loom_status (*source)(char **, char[36], char *, size_t)) {
  char *src = NULL, name[36], err[512];
  loom_status st = source(&src, name, err, sizeof err);
  CHECK_MSG(st == LOOM_OK, "%s: %s", label, err);
  if (st == LOOM_OK)
    queue_job(name, src, NULL, label, (lm_cuda_launch){LM_CUDA_ELEMENTWISE, LM_CUDA_BLOCK, 0});
}

/* The library steps' kernels: fused attention and its backward
 * (LM_STEP_ATTENTION), sort (LM_STEP_SORT) and scan (LM_STEP_SCAN, from
 * ops/scan/scan.cu); their sources carry the prelude. */
static void add_library_kernels(void) {
  add_library_kernel("attention", lm_cuda_attention_source);
  add_library_kernel("attention", lm_cuda_attention_grad_source);
  add_library_kernel("sort", lm_cuda_sort_source);
  add_library_kernel("scan", lm_cuda_scan_source);
}

/* The kernel shape-generic as LOOM_DYNAMIC=always makes it (every extent and
 * every size constant but -1, 0 and 1 read at run time), compiled too: NVRTC
 * checks the CUDA C that generic kernels are, which the emulated device runs
 * with the host's compiler. */
static lk_inst *generic_of(const lk_kernel *k, lk_kernel *g) {
  int n = lk_kernel_count_sizes(k);
  int64_t *sizes = malloc(sizeof *sizes * (size_t)n), *values = malloc(sizeof *values * (size_t)n);
  unsigned char *lift = malloc((size_t)n);
  if (!sizes || !values || !lift) abort();
  lk_kernel_sizes(k, sizes);
  int lifted = 0;
  for (int i = 0; i < n; i++) lifted += lift[i] = i < k->ndim || sizes[i] < -1 || sizes[i] > 1;
  lk_inst *inst = lifted <= LM_CUDA_MAX_SIZES ? lk_kernel_generalize(k, lift, g, values) : NULL;
  free(sizes), free(values), free(lift);
  return inst;
}

/* Plans the graph behind the targets (and this thread's pending assignments)
 * fused and, with `unfused`, also one kernel per op; collects every kernel
 * step. Nothing runs. */
static void collect(const char *label, loom_tensor *const *ts, int n, bool unfused) {
  int npending = lm_pending_count(), count = 0;
  lm_node **nodes = malloc(sizeof *nodes * (size_t)(n + npending + 1));
  for (int i = 0; i < n + npending; i++) {
    lm_node *node = i < n ? (ts[i] ? ts[i]->node : NULL) : lm_pending_at(i - n);
    CHECK_MSG(node != NULL, "%s: target %d is an error: %s", label, i,
              i < n && ts[i] ? loom_error_message(ts[i]) : "NULL");
    if (node && !lm_is_computed(node)) nodes[count++] = node;
  }
  lm_graph g;
  if (count > 0 && lm_graph_build(&g, nodes, count) == LOOM_OK) {
    for (int fuse = 1; fuse >= (unfused ? 0 : 1); fuse--) {
      lm_plan *p = NULL;
      char err[1024];
      loom_status st = lm_plan_make(&g, fuse, &p, err, sizeof err);
      CHECK_MSG(st == LOOM_OK, "%s: lm_plan: %s", label, err);
      if (p && fuse) lm_plan_in_place(&g, p); /* as realize.c plans a lazy graph */
      for (int s = 0; p && s < p->nsteps; s++) {
        const lm_step *step = &p->steps[s];
        if (step->kind != LM_STEP_KERNEL) continue;
        add_kernel(label, &step->kernel);
        if (step->gemm_partner >= 0)
          add_fused(label, &step->kernel, step->gemm_slot, &p->steps[step->gemm_partner].gemm);
        lk_kernel generic;
        lk_inst *inst = fuse ? generic_of(&step->kernel, &generic) : NULL;
        if (inst && step->gemm_partner >= 0)
          add_fused(label, &generic, step->gemm_slot, &p->steps[step->gemm_partner].gemm);
        else if (inst)
          add_kernel(label, &generic);
        free(inst);
      }
      lm_plan_free(p);
    }
    lm_graph_free(&g);
  }
  free(nodes);
  lm_pending_clear();
}

/* ------------------------------------------------------------------ graphs */

#define MAX_TARGETS 512
static loom_tensor *targets[MAX_TARGETS];
static int ntargets;

static void add_target(loom_tensor *t) {
  CHECK_MSG(ntargets < MAX_TARGETS, "more than %d targets in one graph", MAX_TARGETS);
  if (ntargets < MAX_TARGETS) targets[ntargets++] = t;
}

/* Adds t as a target; it must not be an error tensor. */
static void T(loom_tensor *t) {
  CHECK_MSG(loom_status_of(t) == LOOM_OK, "building a graph: %s", loom_error_message(t));
  if (loom_status_of(t) == LOOM_OK) add_target(t);
}

/* The same in the sweeps over dtypes, where an op may refuse one (neg of a
 * bool, mean of an integer): error tensors are left out (the coverage checks
 * at the end say whether something is missing). */
static void TD(loom_tensor *t) {
  if (loom_status_of(t) == LOOM_OK)
    add_target(t);
  else
    loom_clear_error();
}

static void flush_plans(const char *label, bool unfused) {
  collect(label, targets, ntargets, unfused);
  ntargets = 0;
}

static void flush(const char *label) { flush_plans(label, true); }

static void *zeros_data;

/* A realized input (zeros: the kernels only need its shape and dtype). */
static loom_tensor *in(loom_shape s, loom_dtype dt) {
  return loom_from_data(zeros_data, s, dt, LOOM_CPU);
}

static loom_tensor *leaf(loom_shape s) {
  loom_tensor *t = in(s, LOOM_F32);
  loom_set_requires_grad(t, true);
  return t;
}

static const loom_dtype ALL_DTYPES[] = {LOOM_F32, LOOM_F64, LOOM_I32, LOOM_I64, LOOM_U8, LOOM_BOOL,
                                        LOOM_I8,  LOOM_I16, LOOM_U16, LOOM_U32, LOOM_U64};
#define NDTYPES ((int)(sizeof ALL_DTYPES / sizeof ALL_DTYPES[0]))

static void graphs_elementwise(loom_dtype dt) {
  LOOM_SCOPE {
    loom_tensor *a = in(LOOM_SHAPE(4, 8), dt), *b = in(LOOM_SHAPE(4, 8), dt);
    loom_tensor *row = in(LOOM_SHAPE(8), dt), *col = in(LOOM_SHAPE(4, 1), dt);
    loom_tensor *cond = in(LOOM_SHAPE(4, 8), LOOM_BOOL);
    TD(loom_add(a, b)), TD(loom_sub(a, b)), TD(loom_mul(a, b)), TD(loom_div(a, b));
    TD(loom_pow(a, b)), TD(loom_maximum(a, b)), TD(loom_minimum(a, b));
    TD(loom_lt(a, b)), TD(loom_le(a, b)), TD(loom_gt(a, b)), TD(loom_ge(a, b));
    TD(loom_eq(a, b)), TD(loom_ne(a, b));
    TD(loom_logical_and(a, b)), TD(loom_logical_or(a, b)), TD(loom_logical_not(a));
    TD(loom_where(cond, a, b)), TD(loom_where(cond, a, row));
    TD(loom_add(a, row)), TD(loom_mul(col, row)), TD(loom_sub(col, a));
    TD(loom_neg(a)), TD(loom_abs(a)), TD(loom_exp(a)), TD(loom_log(a)), TD(loom_sqrt(a));
    TD(loom_rsqrt(a)), TD(loom_sin(a)), TD(loom_cos(a)), TD(loom_tanh(a)), TD(loom_sigmoid(a));
    TD(loom_relu(a)), TD(loom_gelu(a)), TD(loom_silu(a)), TD(loom_square(a));
    TD(loom_reciprocal(a)), TD(loom_erf(a));
    TD(loom_add_s(a, 3)), TD(loom_sub_s(a, 2)), TD(loom_rsub_s(1, a)), TD(loom_mul_s(a, 2.5));
    TD(loom_div_s(a, 3)), TD(loom_rdiv_s(1, a)), TD(loom_pow_s(a, 2)), TD(loom_pow_s(a, 0.5));
    TD(loom_maximum_s(a, 0)), TD(loom_minimum_s(a, 1)), TD(loom_lt_s(a, 0.5)), TD(loom_le_s(a, 1));
    TD(loom_gt_s(a, 0)), TD(loom_ge_s(a, -1)), TD(loom_eq_s(a, 1)), TD(loom_ne_s(a, 0));
    /* a chain: one fused kernel with many ops */
    TD(loom_add(loom_mul(loom_relu(loom_add(loom_mul_s(a, 1.5), b)), loom_sigmoid(a)),
                loom_mul_s(loom_tanh(b), 0.5)));
    flush(loom_dtype_name(dt));
  }
}

static void graphs_casts(void) {
  LOOM_SCOPE {
    for (int i = 0; i < NDTYPES; i++)
      for (int j = 0; j < NDTYPES; j++)
        T(loom_cast(in(LOOM_SHAPE(5, 7), ALL_DTYPES[i]), ALL_DTYPES[j]));
    /* extreme constants of every dtype */
    loom_tensor *f = in(LOOM_SHAPE(9), LOOM_F32), *d = in(LOOM_SHAPE(9), LOOM_F64);
    T(loom_add_s(f, 1e300)), T(loom_mul_s(f, -1e-45)), T(loom_add_s(d, 1e-310));
    T(loom_maximum_s(d, -INFINITY)), T(loom_minimum_s(f, INFINITY)), T(loom_add_s(f, NAN));
    T(loom_add_s(in(LOOM_SHAPE(9), LOOM_I64), -9223372036854775807.0));
    T(loom_add_s(in(LOOM_SHAPE(9), LOOM_I32), -2147483648.0));
    T(loom_mul_s(in(LOOM_SHAPE(9), LOOM_U8), 255));
    T(loom_add_s(in(LOOM_SHAPE(9), LOOM_I8), -128));
    flush("casts");
  }
}

/* Every bitcast between dtypes of one element size, BF16 and F16 included. */
static void graphs_bitcasts(void) {
  static const loom_dtype dts[] = {LOOM_F32,  LOOM_F64,  LOOM_I32, LOOM_I64, LOOM_U8,
                                   LOOM_BOOL, LOOM_I8,   LOOM_I16, LOOM_U16, LOOM_U32,
                                   LOOM_U64,  LOOM_BF16, LOOM_F16};
  const int n = (int)(sizeof dts / sizeof dts[0]);
  LOOM_SCOPE {
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n; j++)
        if (i != j && loom_dtype_size(dts[i]) == loom_dtype_size(dts[j]))
          T(loom_bitcast(in(LOOM_SHAPE(5, 7), dts[i]), dts[j]));
    flush("bitcasts");
  }
}

/* Every accumulator (sum, integer extreme, (value, index) pairs, log-sum-exp)
 * over the last axis and the first; with `all`, the epilogues built on them. */
static void reductions_of(loom_tensor *x, int last, bool all) {
  int ax0[] = {0}, axl[] = {last};
  TD(loom_sum(x, axl, 1, true)), TD(loom_sum(x, ax0, 1, false)), TD(loom_max(x, axl, 1, false));
  TD(loom_min(x, ax0, 1, true)), TD(loom_argmax(x, last, false)), TD(loom_argmin(x, 0, false));
  TD(loom_logsumexp(x, last));
  if (!all) return;
  TD(loom_sum_all(x)), TD(loom_mean(x, axl, 1, false)), TD(loom_mean_all(x));
  TD(loom_max(x, NULL, 0, false)), TD(loom_argmax(x, 0, true)), TD(loom_logsumexp(x, 0));
  TD(loom_softmax(x, last)), TD(loom_log_softmax(x, last)), TD(loom_softmax(x, 0));
}

static void graphs_reductions(loom_dtype dt) {
  LOOM_SCOPE {
    /* rows of 10 (a thread per point), 500 (a warp), 5000 (a block) */
    reductions_of(in(LOOM_SHAPE(6, 10), dt), 1, false);
    reductions_of(in(LOOM_SHAPE(6, 500), dt), 1, true);
    reductions_of(in(LOOM_SHAPE(3, 5000), dt), 1, false);
    loom_tensor *x4 = in(LOOM_SHAPE(2, 3, 4, 5), dt);
    reductions_of(x4, 3, false);
    TD(loom_sum(x4, (int[]){1, 3}, 2, false)), TD(loom_max(x4, (int[]){0, 2}, 2, true));
    TD(loom_min(x4, (int[]){1, 2, 3}, 3, false));
    /* reductions with epilogues reading their inputs */
    loom_tensor *x = in(LOOM_SHAPE(6, 500), dt);
    TD(loom_add(loom_sum(x, (int[]){0}, 1, false), in(LOOM_SHAPE(500), dt)));
    TD(loom_sub(x, loom_max(x, (int[]){1}, 1, true)));
    flush(loom_dtype_name(dt));
  }
}

static void graphs_reduction_edges(void) {
  LOOM_SCOPE {
    /* empty rows (the identity), no output points at all */
    T(loom_sum(in(LOOM_SHAPE(3, 0), LOOM_F32), (int[]){1}, 1, false));
    T(loom_sum(in(LOOM_SHAPE(0, 5), LOOM_F64), (int[]){0}, 1, false));
    T(loom_sum(in(LOOM_SHAPE(0, 5), LOOM_I32), (int[]){1}, 1, false));
    T(loom_logsumexp(in(LOOM_SHAPE(4, 0), LOOM_F32), 1));
    /* long reductions: split into partials, then combined */
    loom_tensor *big = in(LOOM_SHAPE(1 << 20), LOOM_F32);
    T(loom_mean_all(big)), T(loom_max(big, NULL, 0, false)), T(loom_argmax(big, 0, false));
    T(loom_logsumexp(big, 0)), T(loom_sum_all(in(LOOM_SHAPE(1 << 17), LOOM_I32)));
    T(loom_sum(in(LOOM_SHAPE(4, 1 << 17), LOOM_F64), (int[]){1}, 1, false));
    /* a bool max/min */
    loom_tensor *bo = in(LOOM_SHAPE(4, 40), LOOM_BOOL);
    T(loom_max(bo, (int[]){1}, 1, false)), T(loom_min(bo, (int[]){0}, 1, false));
    flush("reduction edges");
  }
}

static void graphs_views(void) {
  LOOM_SCOPE {
    loom_tensor *x = in(LOOM_SHAPE(4, 6, 8), LOOM_F32), *y = in(LOOM_SHAPE(8, 6, 4), LOOM_F32);
    T(loom_add(loom_permute(x, (int[]){2, 1, 0}, 3), y));
    T(loom_mul_s(loom_reshape(loom_transpose(x, 0, 2), LOOM_SHAPE(8, 24)), 2));
    T(loom_reshape(loom_transpose(x, 1, 2), LOOM_SHAPE(-1)));
    T(loom_exp(loom_slice(x, 2, 1, 8, 3))), T(loom_neg(loom_slice(x, 0, 1, 3, 1)));
    T(loom_pad(x, (int64_t[]){1, 2, 0, 3}, 4, -1.5));
    T(loom_pad(x, (int64_t[]){-1, 2}, 2, 0));
    loom_tensor *parts[3] = {x, loom_mul_s(x, 2), loom_slice(x, 2, 0, 3, 1)};
    T(loom_cat(parts, 3, 2)), T(loom_cat(parts, 2, 0)), T(loom_stack(parts, 2, 1));
    T(loom_add(loom_expand(in(LOOM_SHAPE(4, 1, 8), LOOM_F32), LOOM_SHAPE(4, 6, 8)), x));
    T(loom_flatten(loom_permute(x, (int[]){1, 0, 2}, 3), 0, 1));
    T(loom_contiguous(loom_transpose(in(LOOM_SHAPE(3, 70000), LOOM_F32), 0, 1)));
    T(loom_sum(loom_transpose(x, 0, 2), (int[]){1, 2}, 2, false));
    loom_tensor *img = in(LOOM_SHAPE(2, 3, 9, 9), LOOM_F32);
    T(loom_max_pool2d(img, 3, 2, 1)), T(loom_avg_pool2d(img, 2, 0, 0));
    T(loom_avg_pool2d(img, 3, 1, 1));
    T(loom_arange(0, 10, 0.5, LOOM_F32, LOOM_CPU)), T(loom_arange(5, -5, -1, LOOM_I64, LOOM_CPU));
    T(loom_full(LOOM_SHAPE(3, 3), 7, LOOM_I32, LOOM_CPU));
    flush("views");
  }
}

static void graphs_gather(void) {
  LOOM_SCOPE {
    loom_tensor *w = leaf(LOOM_SHAPE(10, 4));
    loom_tensor *i64 = in(LOOM_SHAPE(3, 5), LOOM_I64), *i32 = in(LOOM_SHAPE(7), LOOM_I32);
    loom_tensor *e = loom_embedding_f(i64, w);
    T(e), T(loom_relu(loom_embedding_f(i32, w))), T(loom_one_hot(i64, 10));
    T(loom_embedding_f(loom_argmax(in(LOOM_SHAPE(5, 10), LOOM_F32), 1, false), w));
    loom_tensor *loss = loom_sum_all(loom_square(e));
    T(loss);
    CHECK_OK(loom_backward(loss));
    T(loom_grad(w));
    flush("gather");
  }
}

static void graphs_conv(void) {
  LOOM_SCOPE {
    loom_tensor *x = leaf(LOOM_SHAPE(2, 4, 10, 10)), *w = leaf(LOOM_SHAPE(6, 4, 3, 3));
    loom_tensor *b = leaf(LOOM_SHAPE(6)), *wg = leaf(LOOM_SHAPE(6, 2, 3, 3));
    loom_tensor *y = loom_conv2d_f(x, w, b, (loom_conv2d_opts){.padding = {1, 1}});
    loom_tensor *y2 = loom_conv2d_f(
        x, wg, NULL, (loom_conv2d_opts){.stride = {2, 2}, .dilation = {2, 1}, .groups = 2});
    loom_tensor *p = loom_max_pool2d(loom_relu(y), 2, 0, 0);
    loom_tensor *loss = loom_add(loom_sum_all(loom_mul(p, p)), loom_mean_all(y2));
    T(y), T(y2), T(loss);
    CHECK_OK(loom_backward(loss));
    T(loom_grad(x)), T(loom_grad(w)), T(loom_grad(b)), T(loom_grad(wg));
    flush("conv2d");
  }
  LOOM_SCOPE {
    loom_tensor *x = leaf(LOOM_SHAPE(4, 3, 6, 6));
    loom_tensor *rm = in(LOOM_SHAPE(3), LOOM_F32), *rv = in(LOOM_SHAPE(3), LOOM_F32);
    loom_tensor *g = leaf(LOOM_SHAPE(3)), *bb = leaf(LOOM_SHAPE(3));
    loom_tensor *y = loom_batch_norm(x, rm, rv, g, bb, true, 0.1, 1e-5);
    loom_tensor *loss = loom_mean_all(loom_square(loom_avg_pool2d(y, 2, 0, 0)));
    T(y), T(loss);
    CHECK_OK(loom_backward(loss));
    T(loom_grad(x)), T(loom_grad(g)), T(loom_grad(bb));
    T(loom_batch_norm(x, rm, rv, g, bb, false, 0.1, 1e-5));
    flush("batch norm");
  }
}

static void graphs_matmul(void) {
  LOOM_SCOPE {
    loom_tensor *x = leaf(LOOM_SHAPE(3, 20, 16)), *w = leaf(LOOM_SHAPE(12, 16));
    loom_tensor *b = leaf(LOOM_SHAPE(12)), *res = in(LOOM_SHAPE(20, 12), LOOM_F32);
    loom_tensor *y = loom_relu(loom_linear_f(x, w, b));
    T(y), T(loom_add(loom_gelu(loom_linear_f(x, w, b)), res));
    T(loom_matmul(in(LOOM_SHAPE(5, 7), LOOM_I64), in(LOOM_SHAPE(7, 3), LOOM_I64)));
    T(loom_matmul(in(LOOM_SHAPE(2, 5, 7), LOOM_F64), in(LOOM_SHAPE(7), LOOM_F64)));
    loom_tensor *loss = loom_mean_all(loom_mul(y, y));
    CHECK_OK(loom_backward(loss));
    T(loss), T(loom_grad(x)), T(loom_grad(w)), T(loom_grad(b));
    flush("matmul");
  }
}

/* GEMMs whose only reader is an elementwise kernel: the epilogue fuses into
 * the tiled kernel (one graph each, so that nothing else reads the product). */
static void graphs_gemm_epilogues(void) {
  for (int dt = LOOM_F32; dt <= LOOM_F64; dt++)
    for (int t = 0; t < 4; t++) {
      LOOM_SCOPE {
        loom_tensor *a = in(t & 1 ? LOOM_SHAPE(2, 16, 20) : LOOM_SHAPE(2, 20, 16), dt);
        loom_tensor *b = in(t & 2 ? LOOM_SHAPE(12, 16) : LOOM_SHAPE(16, 12), dt);
        loom_tensor *bias = in(LOOM_SHAPE(12), dt);
        loom_tensor *at = t & 1 ? loom_transpose(a, 1, 2) : a;
        loom_tensor *bt = t & 2 ? loom_transpose(b, 0, 1) : b;
        loom_tensor *y = loom_matmul(at, bt);
        T(t == 3 ? loom_dropout(loom_gelu(y), 0.2, loom_key_new(3), true)
                 : loom_relu(loom_add(y, bias)));
        flush(dt == LOOM_F32 ? "f32 gemm epilogue" : "f64 gemm epilogue");
      }
    }
}

static void graphs_random(void) {
  LOOM_SCOPE {
    loom_key k = loom_key_new(42);
    T(loom_rand_key(k, LOOM_SHAPE(3, 5), LOOM_F32, LOOM_CPU));
    T(loom_rand_key(k, LOOM_SHAPE(3, 5), LOOM_F64, LOOM_CPU));
    T(loom_randn_key(k, LOOM_SHAPE(7), LOOM_F32, LOOM_CPU));
    T(loom_randn_key(k, LOOM_SHAPE(2, 2, 3), LOOM_F64, LOOM_CPU));
    T(loom_bernoulli_key(k, 0.3, LOOM_SHAPE(10), LOOM_CPU));
    loom_tensor *x = in(LOOM_SHAPE(8, 32), LOOM_F32);
    T(loom_dropout(x, 0.25, loom_key_fold(k, 1), true));
    T(loom_sum(loom_mul(x, loom_randn_key(k, LOOM_SHAPE(8, 32), LOOM_F32, LOOM_CPU)), (int[]){1}, 1,
               false));
    flush("random");
  }
}

/* A KV cache taking its position's row, both ways round: updates in place. */
static void graphs_in_place(void) {
  LOOM_SCOPE {
    for (int kept_first = 0; kept_first < 2; kept_first++) {
      loom_tensor *cache = in(LOOM_SHAPE(2, 3, 9, 4), LOOM_F32);
      loom_tensor *row = in(LOOM_SHAPE(2, 3, 1, 4), LOOM_F32), *pos = in(LOOM_SHAPE0, LOOM_I64);
      loom_tensor *at =
          loom_reshape(loom_arange(0, 9, 1, LOOM_I64, LOOM_CPU), LOOM_SHAPE(1, 1, 9, 1));
      CHECK_OK(loom_assign(cache, kept_first ? loom_where(loom_ne(at, pos), cache, row)
                                             : loom_where(loom_eq(at, pos), row, cache)));
    }
    flush_plans("in place", false);
  }
}

static void graphs_losses(void) {
  LOOM_SCOPE {
    loom_tensor *logits = leaf(LOOM_SHAPE(16, 10)), *labels = in(LOOM_SHAPE(16), LOOM_I64);
    loom_tensor *pred = leaf(LOOM_SHAPE(16, 3)), *target = in(LOOM_SHAPE(16, 3), LOOM_F32);
    loom_tensor *ln = loom_layer_norm(logits, 1, in(LOOM_SHAPE(10), LOOM_F32),
                                      in(LOOM_SHAPE(10), LOOM_F32), 1e-5);
    loom_tensor *losses[4] = {loom_cross_entropy(ln, labels),
                              loom_nll_loss(loom_log_softmax(logits, 1), labels),
                              loom_mse_loss(pred, target), loom_bce_with_logits(pred, target)};
    loom_tensor *total = loom_add(loom_add(losses[0], losses[1]), loom_add(losses[2], losses[3]));
    for (int i = 0; i < 4; i++) T(losses[i]);
    CHECK_OK(loom_backward(total));
    T(total), T(loom_grad(logits)), T(loom_grad(pred));
    flush("losses");
  }
}

/* One training step each: forward, backward and the optimizer's updates as
 * one program (the updates are pending assignments collect() picks up). */
static void train_step(const char *label, loom_params *ps, loom_optim *opt, loom_tensor *loss) {
  loom_optim_zero_grad(opt);
  CHECK_OK(loom_backward(loss));
  CHECK_OK(loom_optim_step(opt));
  T(loss);
  flush_plans(label, false); /* the single ops of training are planned elsewhere */
  loom_optim_free(opt);
  loom_params_free(ps);
}

static void graphs_training(void) {
  loom_key k[6];
  loom_key_split(loom_key_new(7), k, 6);
  LOOM_SCOPE { /* MLP with layer norm and gelu, Adam */
    loom_params *ps = loom_params_new();
    loom_linear fc1 = loom_linear_new(ps, "fc1", 64, 128, k[0]);
    loom_layernorm lnorm = loom_layernorm_new(ps, "ln", 128);
    loom_linear fc2 = loom_linear_new(ps, "fc2", 128, 10, k[1]);
    loom_tensor *x = in(LOOM_SHAPE(32, 64), LOOM_F32), *y = in(LOOM_SHAPE(32), LOOM_I64);
    loom_tensor *h = loom_gelu(loom_layernorm_forward(&lnorm, loom_linear_forward(&fc1, x)));
    loom_tensor *loss =
        loom_cross_entropy(loom_linear_forward(&fc2, loom_dropout(h, 0.1, k[2], true)), y);
    train_step(
        "mlp adam", ps,
        loom_adam(ps,
                  (loom_adam_opts){
                      .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01}),
        loss);
  }
  LOOM_SCOPE { /* the same with AdamW + amsgrad */
    loom_params *ps = loom_params_new();
    loom_linear fc = loom_linear_new(ps, "fc", 20, 5, k[3]);
    loom_tensor *x = in(LOOM_SHAPE(8, 20), LOOM_F32), *y = in(LOOM_SHAPE(8, 5), LOOM_F32);
    loom_tensor *loss = loom_mse_loss(loom_tanh(loom_linear_forward(&fc, x)), y);
    train_step("adamw amsgrad", ps,
               loom_adamw(ps, (loom_adam_opts){.lr = 1e-3,
                                               .beta1 = 0.9,
                                               .beta2 = 0.999,
                                               .eps = 1e-8,
                                               .weight_decay = 1e-2,
                                               .amsgrad = true,
                                               .maximize = true}),
               loss);
  }
  LOOM_SCOPE { /* a CNN with batch norm, SGD with momentum */
    loom_params *ps = loom_params_new();
    loom_conv2d c1 =
        loom_conv2d_new(ps, "c1", 1, 8, 3, (loom_conv2d_opts){.padding = {1, 1}}, k[4]);
    loom_batchnorm2d bn = loom_batchnorm2d_new(ps, "bn", 8);
    loom_linear fc = loom_linear_new(ps, "fc", 8 * 4 * 4, 10, k[5]);
    loom_tensor *x = in(LOOM_SHAPE(16, 1, 8, 8), LOOM_F32), *y = in(LOOM_SHAPE(16), LOOM_I64);
    loom_tensor *h = loom_relu(loom_batchnorm2d_forward(&bn, loom_conv2d_forward(&c1, x), true));
    loom_tensor *logits = loom_linear_forward(&fc, loom_flatten(loom_max_pool2d(h, 2, 0, 0), 1, 3));
    loom_tensor *loss = loom_cross_entropy(logits, y);
    train_step("cnn sgd", ps,
               loom_sgd(ps,
                        (loom_sgd_opts){
                            .lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4, .nesterov = true}),
               loss);
  }
}

/* Ops no frontend op lowers to yet (LK_FLOOR), from hand-built kernels. */
static void hand_kernels(void) {
  for (int f64 = 0; f64 < 2; f64++) {
    loom_dtype dt = f64 ? LOOM_F64 : LOOM_F32;
    lk_inst in[3] = {
        {.op = LK_DIM, .dtype = LOOM_I64, .a = -1, .b = -1, .c = -1, .slot = -1, .imm_i = 0},
        {.op = LK_LOAD, .dtype = dt, .a = 0, .b = -1, .c = -1, .slot = 1},
        {.op = LK_FLOOR, .dtype = dt, .a = 1, .b = -1, .c = -1, .slot = -1},
    };
    lk_kernel k = {.ndim = 1,
                   .dom = {100},
                   .nouter = 1,
                   .out_dtype = dt,
                   .acc_dtype = dt,
                   .nslots = 2,
                   .ninst = 3,
                   .nbody = 3,
                   .value = 2,
                   .result = 2,
                   .inst = in};
    add_kernel("hand-built", &k);
  }
}

static void collect_all(void) {
  zeros_data = calloc(1, (size_t)8 << 20);
  if (!zeros_data) abort();
  for (int i = 0; i < NDTYPES; i++) graphs_elementwise(ALL_DTYPES[i]);
  graphs_casts();
  graphs_bitcasts();
  for (int i = 0; i < NDTYPES; i++) graphs_reductions(ALL_DTYPES[i]);
  graphs_reduction_edges();
  graphs_views();
  graphs_gather();
  graphs_conv();
  graphs_matmul();
  graphs_gemm_epilogues();
  graphs_random();
  graphs_in_place();
  graphs_losses();
  graphs_training();
  hand_kernels();
}

static void check_coverage(void) {
  for (int op = 0; op < LK_NUM_OPS; op++)
    CHECK_MSG(op_seen[op], "no kernel uses lk_op %s", lk_op_name((lk_op)op));
  for (int r = LK_RED_SUM; r <= LK_RED_LSE; r++)
    CHECK_MSG(reduce_seen[r], "no kernel uses reduction kind %d", r);
  for (int m = 0; m <= LM_CUDA_ROWS; m++)
    CHECK_MSG(mode_seen[m], "no kernel of lm_cuda_mode %d", m);
  CHECK_MSG(fused_epilogues >= 4, "only %d GEMMs with a fused epilogue", fused_epilogues);
  CHECK_MSG(kept_kernels >= 2, "only %d updates in place", kept_kernels);
  int casts = 0;
  for (int a = 0; a < NDTYPES; a++)
    for (int b = 0; b < NDTYPES; b++) {
      if (a == b) continue;
      casts += cast_seen[ALL_DTYPES[a]][ALL_DTYPES[b]];
      CHECK_MSG(cast_seen[ALL_DTYPES[a]][ALL_DTYPES[b]], "no kernel casts %s to %s",
                loom_dtype_name(ALL_DTYPES[a]), loom_dtype_name(ALL_DTYPES[b]));
    }
  printf("coverage: all %d kernel ops, 6 reductions, 4 thread shapes, %d casts\n", LK_NUM_OPS,
         casts);
}

/* ------------------------------------------------------------------ compiling */

/* Compute capabilities to compile for: LOOM_NVRTC_TEST_ARCHS ("80", "90",
 * "80,90"; CTest runs one per test so they run in parallel), else 80 and 90. */
static int sms[8] = {80, 90}, nsms = 2;

static void choose_archs(void) {
  const char *env = getenv("LOOM_NVRTC_TEST_ARCHS");
  if (!env || !*env) return;
  nsms = 0;
  for (char *end; *env && nsms < 8; env = *end ? end + 1 : end) {
    long sm = strtol(env, &end, 10);
    CHECK_MSG(end != env && sm >= 10 && sm < 1000, "LOOM_NVRTC_TEST_ARCHS: bad entry at '%s'", env);
    if (end == env) break;
    sms[nsms++] = (int)sm;
  }
}
#define LOG_BYTES (64 * 1024)

static atomic_int next_task, compiled, failures;
static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;

static void print_failure(const job *j, int sm, loom_status st, const char *log) {
  pthread_mutex_lock(&print_lock);
  fprintf(stderr, "FAIL %s (%s) for sm_%d: %s\n--- kernel\n%s--- NVRTC log\n%s\n--- source\n",
          j->name, j->label, sm, loom_status_name(st), j->listing ? j->listing : "?\n", log);
  int n = 1;
  fprintf(stderr, "%5d  ", n);
  for (const char *c = j->source; *c; c++) {
    fputc(*c, stderr);
    if (*c == '\n' && c[1]) fprintf(stderr, "%5d  ", ++n);
  }
  pthread_mutex_unlock(&print_lock);
}

/* One kernel alone, its failure reported with its listing and log. */
static void compile_one(const job *j, int sm, char *log) {
  char *bin = NULL;
  size_t len = 0;
  log[0] = '\0';
  loom_status st = lm_nvrtc_compile(j->source, j->name, sm, &bin, &len, log, LOG_BYTES);
  if (st == LOOM_OK && len > 0)
    atomic_fetch_add(&compiled, 1);
  else {
    atomic_fetch_add(&failures, 1);
    print_failure(j, sm, st, log);
  }
  free(bin);
}

/*
 * Kernels are compiled BATCH to a program (the prelude once, then each
 * kernel's own text): NVRTC's start-up per program dominates small kernels,
 * and one translation unit of several extern "C" kernels compiles each the
 * same as alone. A failing batch is compiled again kernel by kernel, so the
 * report names the kernel.
 */
#define BATCH 24

static void compile_batch(int first, int n, int sm, char *log) {
  size_t pre = strlen(lm_cuda_prelude()), total = pre + 1;
  for (int i = first; i < first + n; i++) total += strlen(jobs[i].source) - pre;
  char *src = malloc(total), *at = src;
  if (!src) abort();
  memcpy(at, lm_cuda_prelude(), pre), at += pre;
  for (int i = first; i < first + n; i++) {
    size_t len = strlen(jobs[i].source) - pre;
    memcpy(at, jobs[i].source + pre, len), at += len;
  }
  *at = '\0';
  char name[64], *bin = NULL;
  size_t len = 0;
  snprintf(name, sizeof name, "batch%d_sm%d", first / BATCH, sm);
  loom_status st = lm_nvrtc_compile(src, name, sm, &bin, &len, log, LOG_BYTES);
  free(src);
  free(bin);
  if (st == LOOM_OK && len > 0) {
    atomic_fetch_add(&compiled, n);
    return;
  }
  for (int i = first; i < first + n; i++) compile_one(&jobs[i], sm, log);
}

static void *compile_worker(void *unused) {
  (void)unused;
  char *log = malloc(LOG_BYTES);
  int nbatches = (njobs + BATCH - 1) / BATCH;
  for (int t; log && (t = atomic_fetch_add(&next_task, 1)) < nbatches * nsms;) {
    int first = t / nsms * BATCH;
    int n = njobs - first < BATCH ? njobs - first : BATCH;
    compile_batch(first, n, sms[t % nsms], log);
  }
  free(log);
  return NULL;
}

/* On several threads, which also exercises lm_nvrtc_compile's thread safety;
 * NVRTC 13 was measured to run one compile at a time per process, so the real
 * parallelism is CTest's (one test per architecture). */
static void compile_all(void) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int nthreads = cores < 1 ? 1 : cores > 8 ? 8 : (int)cores;
  pthread_t th[8];
  int started = 0;
  for (int i = 0; i < nthreads; i++)
    started += pthread_create(&th[started], NULL, compile_worker, NULL) == 0;
  if (started == 0) compile_worker(NULL);
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  CHECK_MSG(atomic_load(&failures) == 0, "%d NVRTC compiles failed", atomic_load(&failures));
  CHECK_EQ_INT(atomic_load(&compiled), njobs * nsms);
}

/* ------------------------------------------------------------------ the generated code */

static const job *find_job(const char *label, lm_cuda_mode mode, const char *needle) {
  for (int i = 0; i < njobs; i++)
    if (strcmp(jobs[i].label, label) == 0 && jobs[i].launch.mode == mode &&
        (!needle || strstr(jobs[i].source, needle)))
      return &jobs[i];
  return NULL;
}

/* What the PTX of a few kernels must contain: the design, not just a compile. */
static void check_ptx(const char *what, const job *j, const char *const *needles, int n) {
  CHECK_MSG(j != NULL, "no kernel for the PTX check of %s", what);
  if (!j) return;
  char *ptx = NULL, log[4096];
  size_t len = 0;
  loom_status st = lm_nvrtc_compile_ptx(j->source, j->name, 80, &ptx, &len, log, sizeof log);
  CHECK_MSG(st == LOOM_OK, "%s: PTX: %s", what, log);
  for (int i = 0; st == LOOM_OK && i < n; i++)
    CHECK_MSG(strstr(ptx, needles[i]) != NULL, "%s: the PTX of %s has no %s", what, j->name,
              needles[i]);
  free(ptx);
}

static void test_generated_code(void) {
  /* f32 a + b: vector loads of both inputs, one vector store */
  check_ptx("vectorized elementwise", find_job("f32", LM_CUDA_ELEMENTWISE, "lm_c1.v[lm_j]"),
            (const char *[]){"ld.global.ca.v4.f32", "st.global.wb.v4.f32"}, 2);
  check_ptx("block reduction", find_job("f32", LM_CUDA_RED_BLOCK, NULL),
            (const char *[]){"shfl.sync.bfly", "bar.sync"}, 2);
  check_ptx("row kernel", find_job("f32", LM_CUDA_ROWS, NULL),
            (const char *[]){"shfl.sync.bfly", "bar.sync"}, 2);
  check_ptx("warp reduction", find_job("f64", LM_CUDA_RED_WARP, NULL),
            (const char *[]){"shfl.sync.bfly"}, 1);
  check_ptx("philox", find_job("random", LM_CUDA_ELEMENTWISE, "lm_philox_f32"),
            (const char *[]){"mul.hi.u32"}, 1);
}

/* Codegen rules that need no compiler. */
static void test_codegen_rules(void) {
  lk_inst bad_inst = {.op = LK_ADD, .dtype = LOOM_F32, .a = 5, .b = 0, .c = -1, .slot = -1};
  lk_kernel bad = {.ndim = 1,
                   .dom = {4},
                   .nouter = 1,
                   .out_dtype = LOOM_F32,
                   .acc_dtype = LOOM_F32,
                   .nslots = 1,
                   .ninst = 1,
                   .nbody = 1,
                   .inst = &bad_inst};
  char *src = NULL, name[36], err[256];
  CHECK_RC(lm_cuda_source(&bad, &src, name, NULL, err, sizeof err), LOOM_ERR_COMPILE);
  CHECK_STR_CONTAINS(err, "invalid kernel");
  CHECK(src == NULL);
  /* names are the LLVM backend's symbols; every kernel is one extern "C" global */
  for (int i = 0; i < njobs; i++) {
    if (strcmp(jobs[i].label, "gemm") == 0 || strcmp(jobs[i].label, "attention") == 0 ||
        strcmp(jobs[i].label, "sort") == 0 || strcmp(jobs[i].label, "scan") == 0)
      continue; /* named by dtype and transposes; the library steps' by their names */
    char decl[96];
    snprintf(decl, sizeof decl, "__launch_bounds__(%d) %s(void *s0", LM_CUDA_BLOCK, jobs[i].name);
    if (!strstr(jobs[i].source, decl) || strlen(jobs[i].name) != 35) {
      CHECK_MSG(false, "%s: no kernel named after its hash", jobs[i].name);
      break;
    }
  }
}

/* LOOM_NVRTC_TEST_DUMP=dir writes every generated source to dir/<name>.cu. */
static void dump_sources(void) {
  const char *dir = getenv("LOOM_NVRTC_TEST_DUMP");
  if (!dir || !*dir) return;
  for (int i = 0; i < njobs; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.cu", dir, jobs[i].name);
    FILE *f = fopen(path, "w");
    if (f) fputs(jobs[i].source, f), fclose(f);
    CHECK_MSG(f != NULL, "cannot write %s", path);
  }
}

int main(void) {
  double t0 = now_s();
  test_philox_text();
  collect_all();
  add_gemm_kernels();
  add_library_kernels();
  check_coverage();
  test_codegen_rules();
  dump_sources();
  int per_mode[LM_CUDA_ROWS + 1] = {0};
  for (int i = 0; i < njobs; i++) per_mode[jobs[i].launch.mode]++;
  printf("%d distinct kernels (%d repeats): %d elementwise, %d reductions by thread, %d by warp, "
         "%d by block, %d row kernels; generated in %.2f s\n",
         njobs, duplicates, per_mode[LM_CUDA_ELEMENTWISE], per_mode[LM_CUDA_RED_THREAD],
         per_mode[LM_CUDA_RED_WARP], per_mode[LM_CUDA_RED_BLOCK], per_mode[LM_CUDA_ROWS],
         now_s() - t0);
  char why[1024];
  bool available = lm_nvrtc_available(why, sizeof why);
  /* the nvrtc_missing test points LOOM_NVRTC at nothing: the skip must happen */
  if (getenv("LOOM_NVRTC_TEST_EXPECT_SKIP")) CHECK_MSG(!available, "NVRTC loaded; expected a skip");
  if (!available) {
    printf("SKIP: NVRTC compiles: %s\n", why);
  } else {
    int major = 0, minor = 0;
    lm_nvrtc_version(&major, &minor);
    choose_archs();
    char arch_text[64] = "";
    for (int i = 0; i < nsms; i++)
      snprintf(arch_text + strlen(arch_text), sizeof arch_text - strlen(arch_text), "%ssm_%d",
               i ? " and " : "", sms[i]);
    double t1 = now_s();
    compile_all();
    printf("NVRTC %d.%d compiled %d kernels for %s (%d compiles) in %.1f s\n", major, minor, njobs,
           arch_text, atomic_load(&compiled), now_s() - t1);
    test_generated_code();
  }
  for (int i = 0; i < njobs; i++) free(jobs[i].source), free(jobs[i].listing);
  free(jobs);
  free(zeros_data);
  return check_report();
}
