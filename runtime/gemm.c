/* GEMM steps on the CPU, through loom's own GEMM and OpenBLAS. The product is
 * cut into blocks (per batch index; per part of the rows, the columns or the
 * sum, split over loom's pool; per block of rows when an epilogue kernel
 * follows each block; per block of B's columns when a prologue kernel makes
 * B), and each block is computed by one of the two: loom's (the block
 * function the LLVM backend generates for the step's tile, packing into
 * scratch of its own) or OpenBLAS's cblas_?gemm (?gemv for one row).
 * lm_gemm_prepare chooses, from LOOM_GEMM: by default loom's takes the
 * blocks it was measured faster on (loom_takes) and every product of BF16 or
 * F16 operands, which BLAS has not; OpenBLAS the rest.
 *
 * OpenBLAS runs single-threaded; loom splits rows over its own pool. OpenBLAS's
 * threads busy-wait (sched_yield) after each call, and on a small machine they
 * starved loom's kernels in between: a CNN training step measured 408 ms that
 * way against 46 ms on one thread. */
#include <cblas.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "passes/passes.h"
#include "runtime/blas.h"
#include "runtime/compile.h"
#include "runtime/gemm.h"
#include "runtime/pool.h"
#include "runtime/runtime.h"

void lm_gemm_batch_offsets(const lm_gemm *g, int64_t index, int64_t *ao, int64_t *bo) {
  *ao = g->a_offset, *bo = g->b_offset;
  for (int d = g->nbatch - 1; d >= 0; d--) {
    int64_t i = index % g->batch[d];
    index /= g->batch[d];
    *ao += i * g->a_bstride[d];
    *bo += i * g->b_bstride[d];
  }
}

typedef struct part {
  int64_t r0, r1, c0, c1, k0, k1;
} part;

static void block_beta(const lm_gemm *g, const char *a, const char *b, part p, char *c,
                       int64_t ldc_, bool accumulate);

/* ------------------------------------------------------------ loom's own GEMM */

/* Blocking from the caches the machine reports (BLIS's analytical rule): a
 * sliver of B, kc x NR, takes half of L1; a block of A, mc x kc, half of L2;
 * B's panel, kc x nc, stays in the (large, shared) L3. Written once. */
static struct blocking { int64_t l1, l2; } caches;
static pthread_once_t caches_once = PTHREAD_ONCE_INIT;

static int64_t cache_size(int name, int64_t fallback) {
  long v = sysconf(name);
  return v > 4096 ? (int64_t)v : fallback;
}

static void read_caches(void) {
  caches.l1 = cache_size(_SC_LEVEL1_DCACHE_SIZE, 32 << 10);
  caches.l2 = cache_size(_SC_LEVEL2_CACHE_SIZE, 1 << 20);
}

#define GEMM_NC 4096

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The sum split into equal blocks of whole steps of `step` terms, at most
 * kb each: a paired tile pads every block to whole steps. */
static int64_t even_kc(int64_t k, int64_t kb, int64_t step) {
  int64_t blocks = (k + kb - 1) / kb;
  blocks = blocks > 0 ? blocks : 1;
  return clamp64(((k + blocks - 1) / blocks + step - 1) / step * step, step, 1024);
}

/* AMX's tile products outrun L2: its A block stays in L1 too, two thirds of
 * it beside a B sliver in the rest. One thread, 512 x 1024 x 1024 BF16 on an
 * AVX-512 Xeon (48 KiB L1): kc 384 / mc 512 (the F32 rule) 1.22 ms, kc 256 /
 * mc 64 0.87-0.90 ms. AVX512-BF16's pair products keep BLIS's rule (a B
 * sliver in half of L1, an A block in half of L2) on 2-byte panels. */
static void paired_blocking(const lk_gemm *t, int64_t m, int64_t k, int64_t kb, int64_t room,
                            int64_t *mc, int64_t *kc) {
  int64_t es = (int64_t)loom_dtype_size(t->in_dtype);
  *kc = even_kc(k, kb, LK_GEMM_AMX_K);
  int64_t mb = clamp64(room / (*kc * es) / t->mr * t->mr, t->mr, 4096);
  *mc = clamp64(m, 1, mb);
}

void lm_gemm_block_limits(const lk_gemm *t, int64_t *kb, int64_t *mb, int64_t *nb, int64_t *room) {
  pthread_once(&caches_once, read_caches);
  *nb = GEMM_NC;
  if (lk_gemm_paired(t)) {
    int64_t es = (int64_t)loom_dtype_size(t->in_dtype), step = LK_GEMM_AMX_K;
    int64_t sliver_share = t->amx ? 3 : 2;
    *kb = clamp64(caches.l1 / sliver_share / (t->nr * es) / step * step, step, 1024);
    *room = t->amx ? caches.l1 * 2 / 3 : caches.l2 / 2;
    *mb = 4096; /* from kc: paired_blocking */
    return;
  }
  int64_t es = (int64_t)loom_dtype_size(t->dtype); /* packed */
  *kb = clamp64(caches.l1 / 2 / (t->nr * es) / 8 * 8, 32, 1024);
  *mb = clamp64(caches.l2 / 2 / (*kb * es) / t->mr * t->mr, t->mr, 4096);
  *room = 0;
}

void lm_gemm_blocking(const lk_gemm *t, int64_t m, int64_t n, int64_t k, int64_t *mc, int64_t *kc,
                      int64_t *nc) {
  int64_t kb, mb, nb, room;
  lm_gemm_block_limits(t, &kb, &mb, &nb, &room);
  *nc = clamp64(n, 1, nb);
  if (lk_gemm_paired(t)) {
    paired_blocking(t, m, k, kb, room, mc, kc);
    return;
  }
  *mc = clamp64(m, 1, mb);
  *kc = clamp64(k, 1, kb);
}

void lm_gemm_strides(const lm_gemm *g, int64_t *a_row, int64_t *a_col, int64_t *b_row,
                     int64_t *b_col) {
  *a_row = g->a_trans ? 1 : g->lda;
  *a_col = g->a_trans ? g->lda : 1;
  *b_row = g->b_trans ? 1 : g->ldb;
  *b_col = g->b_trans ? g->ldb : 1;
}

/* Packed panels of the smallest blocks (mr x 32 and 32 x nr): every tile a
 * backend generates fits (nr at most 8 vectors of 16 floats: 20.3 KiB). */
#define GEMM_STACK_PACK_BYTES (32 << 10)

/* C (m x n, row stride ldc) = or += A @ B, A at a and B at b as g lays them
 * out, through g->fn with scratch of its own. */
static void loom_block(const lm_gemm *g, const char *a, const char *b, int64_t m, int64_t n,
                       int64_t k, char *c, int64_t ldc, bool accumulate) {
  lk_gemm_args args = {
      .m = m, .n = n, .k = k, .a = a, .b = b, .c = c, .ldc = ldc, .accumulate = accumulate};
  lm_gemm_strides(g, &args.a_row, &args.a_col, &args.b_row, &args.b_col);
  lm_gemm_blocking(&g->tile, m, n, k, &args.mc, &args.kc, &args.nc);
  size_t bytes = lk_gemm_pack_bytes(&g->tile, args.mc, args.kc, args.nc);
  void *pack = lm_buffer_alloc(bytes);
  if (!pack && g->in_dtype != g->dtype) {
    /* BLAS has no product of these operands: the smallest blocks, packed on
     * the stack, still make it */
    _Alignas(64) unsigned char small[GEMM_STACK_PACK_BYTES];
    args.mc = g->tile.mr, args.kc = LK_GEMM_AMX_K, args.nc = g->tile.nr;
    if (lk_gemm_pack_bytes(&g->tile, args.mc, args.kc, args.nc) <= sizeof small) {
      args.pack = small;
      g->fn(&args);
      lm_stat_add(LM_STAT_GEMM_CALLS, 1);
      return;
    }
  }
  if (!pack) { /* the product must still be made: BLAS needs no scratch of ours */
    lm_gemm plain = *g;
    plain.fn = NULL;
    block_beta(&plain, a, b, (part){0, m, 0, n, 0, k}, c, ldc, accumulate);
    return;
  }
  args.pack = pack;
  args.b_in_place = lk_gemm_b_in_place(&g->tile, m, args.kc, args.b_col);
  g->fn(&args);
  lm_buffer_free(pack, bytes);
  lm_stat_add(LM_STAT_GEMM_CALLS, 1);
}

/* By default (LOOM_GEMM=auto) loom's GEMM computes the blocks it was measured
 * faster on in the digits CNN's training step (an AVX-512 Xeon, two threads,
 * against OpenBLAS 0.3.21's SkylakeX kernels): those it computes unpacked (a
 * few rows, or few outputs of a long sum, against a weight), and wide blocks
 * of few tiles of rows, whose B slivers it reads in place (a convolution's
 * [O, C*KH*KW] @ [C*KH*KW, N*OH*OW]: 16 x 50176 x 9 in 0.105 ms against 0.165,
 * 32 x 12544 x 144 in 0.640 against 0.725). Narrower blocks (a convolution's
 * product over im2col blocks of ~190 columns), more rows, and large products
 * stay with OpenBLAS (1024^3: 0.87x on one thread). */
#define LOOM_WIDE_TILES 8
static bool loom_takes(const lm_gemm *g, int64_t m, int64_t n, int64_t k) {
  int64_t a_row, a_col, b_row, b_col;
  lm_gemm_strides(g, &a_row, &a_col, &b_row, &b_col);
  if (lk_gemm_unpacked(m, n, k, a_col, b_row) || lk_gemm_swept(m, k, b_col)) return true;
  if (m == 1) return false; /* BLAS's matrix-vector product (block_beta) */
  const lk_gemm *t = &g->tile;
  return (m + t->mr - 1) / t->mr <= LK_GEMM_IN_PLACE_MAX_TILES && n >= LOOM_WIDE_TILES * t->nr;
}

/* The product's part [r0, r1) x [c0, c1) summed over [k0, k1) of one batch
 * into c, which points at the part's first element (row stride ldc). */
static void block_beta(const lm_gemm *g, const char *a, const char *b, part p, char *c,
                       int64_t ldc_, bool accumulate) {
  size_t es = loom_dtype_size(g->in_dtype); /* of A and B; BLAS's are C's too */
  int64_t r0 = p.r0, r1 = p.r1, c0 = p.c0, c1 = p.c1;
  /* A row r starts at r * lda (not transposed) or at column r (transposed),
   * its element k k further on (or k rows down); B's column j at j (not
   * transposed) or at row j * ldb, its element k k rows down (or k further) */
  const char *ar = a + (g->a_trans ? r0 + p.k0 * g->lda : r0 * g->lda + p.k0) * (int64_t)es;
  b += (g->b_trans ? c0 * g->ldb + p.k0 : c0 + p.k0 * g->ldb) * (int64_t)es;
  blasint m = (blasint)(r1 - r0), n = (blasint)(c1 - c0), k = (blasint)(p.k1 - p.k0);
  blasint ldc = (blasint)(ldc_ > 1 ? ldc_ : 1);
  enum CBLAS_TRANSPOSE ta = g->a_trans ? CblasTrans : CblasNoTrans;
  enum CBLAS_TRANSPOSE tb = g->b_trans ? CblasTrans : CblasNoTrans;
  if (g->fn && (g->fn_for_all || loom_takes(g, r1 - r0, c1 - c0, p.k1 - p.k0))) {
    loom_block(g, ar, b, r1 - r0, c1 - c0, p.k1 - p.k0, c, ldc_, accumulate);
    return;
  }
  /* one row against B where loom's GEMM does not take it (LOOM_GEMM=blas):
   * BLAS's matrix-vector product streams B once, where its GEMM packed all of it */
  blasint incx = (blasint)(g->a_trans ? g->lda : 1);
  enum CBLAS_TRANSPOSE tv = g->b_trans ? CblasNoTrans : CblasTrans;
  blasint vrows = g->b_trans ? n : k, vcols = g->b_trans ? k : n;
  if (k == 0) {
    for (int64_t r = r0; r < r1 && !accumulate; r++)
      memset(c + (r - r0) * ldc_ * (int64_t)es, 0, (size_t)n * es);
  } else if (m == 1 && g->dtype == LOOM_F32) {
    cblas_sgemv(CblasRowMajor, tv, vrows, vcols, 1.0f, (const float *)b, (blasint)g->ldb,
                (const float *)ar, incx, accumulate ? 1.0f : 0.0f, (float *)c, 1);
  } else if (m == 1) {
    cblas_dgemv(CblasRowMajor, tv, vrows, vcols, 1.0, (const double *)b, (blasint)g->ldb,
                (const double *)ar, incx, accumulate ? 1.0 : 0.0, (double *)c, 1);
  } else if (g->dtype == LOOM_F32) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, (const float *)ar, (blasint)g->lda,
                (const float *)b, (blasint)g->ldb, accumulate ? 1.0f : 0.0f, (float *)c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, (const double *)ar, (blasint)g->lda,
                (const double *)b, (blasint)g->ldb, accumulate ? 1.0 : 0.0, (double *)c, ldc);
  }
  lm_stat_add(LM_STAT_GEMM_CALLS, 1);
}

static void block(const lm_gemm *g, const char *a, const char *b, part p, char *c, int64_t ldc) {
  block_beta(g, a, b, p, c, ldc, false);
}

int64_t lm_gemm_batches(const lm_gemm *g) {
  int64_t batches = 1;
  for (int d = 0; d < g->nbatch; d++) batches *= g->batch[d];
  return batches;
}

/* One part of a row range, on a pool thread. */
typedef struct row_task {
  const lm_gemm *g;
  const char *a, *b;
  int64_t r0;
  char *c;
} row_task;

static void row_part(void *ctx, int64_t begin, int64_t end) {
  const row_task *t = ctx;
  size_t es = loom_dtype_size(t->g->dtype);
  part p = {t->r0 + begin, t->r0 + end, 0, t->g->N, 0, t->g->K};
  block(t->g, t->a, t->b, p, t->c + begin * t->g->N * (int64_t)es, t->g->N);
}

/* All the rows, a part of the columns. */
typedef struct col_task {
  const lm_gemm *g;
  const char *a, *b;
  int64_t r0, r1;
  char *c;
} col_task;

static void col_part(void *ctx, int64_t begin, int64_t end) {
  const col_task *t = ctx;
  size_t es = loom_dtype_size(t->g->dtype);
  part p = {t->r0, t->r1, begin, end, 0, t->g->K};
  block(t->g, t->a, t->b, p, t->c + begin * (int64_t)es, t->g->N);
}

/* All the outputs, a part of the sum, into the part's own block of sums. */
typedef struct sum_task {
  const lm_gemm *g;
  const char *a, *b;
  int64_t r0, r1;
  int parts;
  char *partials; /* [parts][r1 - r0][N] */
} sum_task;

static void sum_part(void *ctx, int64_t begin, int64_t end) {
  const sum_task *t = ctx;
  int64_t outputs = (t->r1 - t->r0) * t->g->N;
  for (int64_t q = begin; q < end; q++) {
    part p = {t->r0, t->r1, 0, t->g->N, t->g->K * q / t->parts, t->g->K * (q + 1) / t->parts};
    block(t->g, t->a, t->b, p, t->partials + q * outputs * (int64_t)loom_dtype_size(t->g->dtype),
          t->g->N);
  }
}

/* c = the partial sums added in part order: the same bits for the same
 * thread count, whichever thread computed which part. */
#define ADD_PARTIALS(T)                                                                            \
  for (int64_t i = 0; i < outputs; i++) {                                                          \
    T v = ((const T *)partials)[i];                                                                \
    for (int q = 1; q < parts; q++) v += ((const T *)partials)[q * outputs + i];                   \
    ((T *)c)[i] = v;                                                                               \
  }

static void add_partials(const lm_gemm *g, const char *partials, int parts, int64_t outputs,
                         char *c) {
  if (g->dtype == LOOM_F32) {
    ADD_PARTIALS(float)
  } else {
    ADD_PARTIALS(double)
  }
}

/* Below this many multiply-adds a GEMM runs on one thread. */
#define GEMM_PARALLEL_WORK (1 << 21)
/* Fewer rows (columns) than this per thread pack B (A) for too little work. */
#define GEMM_MIN_ROWS 32
#define GEMM_MIN_COLS 64
/* A B of more bytes than this (past the caches), with more columns than A has
 * rows, splits columns: split by rows, every thread packed all of B (GPT-2's
 * head, [256, 768] @ [768, 50257]: 142 -> 103 ms on two threads). */
#define GEMM_SHARED_B_BYTES (4 << 20)
/* A B of more bytes than this, against a few rows, is split however little
 * the arithmetic: reading B is the work (GPT-2 124M's decoding, one token). */
#define GEMM_STREAM_B_BYTES (1 << 20)
/* Few outputs (up to this many) and a long sum split the sum instead. */
#define GEMM_SPLIT_SUM_OUTPUTS 4096
#define GEMM_MIN_SUM_PART 1024

/* Whether rows [0, n) of one batch of g are too little work to split over
 * threads: a few rows against a B past the caches are bound by reading B,
 * so threads add bandwidth even for little arithmetic. */
static bool one_part(const lm_gemm *g, int64_t n) {
  bool streams_b =
      n <= LK_GEMM_DOT_MAX_ROWS &&
      (double)g->N * (double)g->K * (double)loom_dtype_size(g->in_dtype) > GEMM_STREAM_B_BYTES;
  return n * g->N * g->K < GEMM_PARALLEL_WORK && !streams_b;
}

static void run_rows(const lm_gemm *g, const void *a, const void *b, int64_t batch, int64_t r0,
                     int64_t r1, void *c) {
  if (r1 <= r0 || g->N == 0) return;
  size_t es = loom_dtype_size(g->dtype);
  int64_t ao, bo;
  lm_gemm_batch_offsets(g, batch, &ao, &bo);
  size_t in_es = loom_dtype_size(g->in_dtype);
  const char *ab = (const char *)a + ao * (int64_t)in_es,
             *bb = (const char *)b + bo * (int64_t)in_es;
  int64_t n = r1 - r0, threads = loom_num_threads(), parts = threads;
  if (one_part(g, n)) parts = 1;
  if (parts > 1 && n / GEMM_MIN_ROWS < parts && g->N / GEMM_MIN_COLS < 2 &&
      n * g->N <= GEMM_SPLIT_SUM_OUTPUTS && g->K / GEMM_MIN_SUM_PART >= 2) {
    /* few outputs, a long sum (a convolution's weight gradient [O, C*KH*KW]
     * over N*OH*OW) */
    int kparts = (int)(g->K / GEMM_MIN_SUM_PART < parts ? g->K / GEMM_MIN_SUM_PART : parts);
    size_t bytes = (size_t)kparts * (size_t)(n * g->N) * es;
    char *partials = malloc(bytes);
    if (partials) {
      sum_task t = {g, ab, bb, r0, r1, kparts, partials};
      lm_parallel_for(kparts, kparts, sum_part, &t);
      add_partials(g, partials, kparts, n * g->N, c);
      free(partials);
      return;
    }
  }
  bool b_dominates = g->N > n &&
                     (double)g->K * (double)g->N * (double)in_es > GEMM_SHARED_B_BYTES &&
                     g->N / GEMM_MIN_COLS >= parts;
  if (parts > 1 && ((n / GEMM_MIN_ROWS < parts && g->N / GEMM_MIN_COLS >= 2) || b_dominates)) {
    /* few rows, many columns (a convolution's [O, N*OH*OW]), or a B larger than
     * A and than cache (a vocabulary's head): split the columns, each part
     * packing its own columns of B rather than all of them */
    int64_t cparts = g->N / GEMM_MIN_COLS < parts ? g->N / GEMM_MIN_COLS : parts;
    col_task t = {g, ab, bb, r0, r1, c};
    lm_parallel_for(g->N, (int)cparts, col_part, &t);
    return;
  }
  if (parts > n / GEMM_MIN_ROWS) parts = n / GEMM_MIN_ROWS > 0 ? n / GEMM_MIN_ROWS : 1;
  row_task t = {g, ab, bb, r0, c};
  lm_parallel_for(n, (int)parts, row_part, &t);
}

void lm_run_gemm_rows(const lm_gemm *g, const void *a, const void *b, int64_t batch, int64_t r0,
                      int64_t r1, void *c) {
  lm_blas_single_threaded();
  run_rows(g, a, b, batch, r0, r1, c);
}

/* Batches [begin, end) of a GEMM, each on this thread. */
typedef struct batch_task {
  const lm_gemm *g;
  const void *a, *b;
  char *c;
} batch_task;

static void batch_part(void *ctx, int64_t begin, int64_t end) {
  const batch_task *t = ctx;
  int64_t bytes = t->g->M * t->g->N * (int64_t)loom_dtype_size(t->g->dtype);
  for (int64_t i = begin; i < end; i++) run_rows(t->g, t->a, t->b, i, 0, t->g->M, t->c + i * bytes);
}

void lm_run_gemm(const lm_gemm *g, const void *a, const void *b, void *c) {
  int64_t batches = lm_gemm_batches(g);
  if (g->M * g->N == 0) return;
  lm_blas_single_threaded();
  batch_task t = {g, a, b, c};
  /* Batches too small to split (attention's per-head products while decoding,
   * [1, 64] @ [64, T]) run side by side when together they are not: the same
   * single-threaded code per batch, so the same bits on any thread. */
  int parts = 1;
  if (batches > 1 && one_part(g, g->M)) {
    double in_es = (double)loom_dtype_size(g->in_dtype);
    bool work = (double)batches * (double)(g->M * g->N * g->K) >= GEMM_PARALLEL_WORK;
    bool reads = (double)batches * (double)g->N * (double)g->K * in_es > GEMM_STREAM_B_BYTES;
    if (work || reads) parts = batches < loom_num_threads() ? (int)batches : loom_num_threads();
  }
  lm_parallel_for(batches, parts, batch_part, &t);
}

/* ------------------------------------------------------------ B made in blocks */

/* Columns of B's stored matrix per block: that block and the columns of C
 * (or A) it meets take about this many bytes, which stay in L2 with
 * OpenBLAS's packed copies. */
#define FILL_BLOCK_BYTES (128 << 10)
#define FILL_MIN_COLS 64
#define FILL_BLOCK_BYTES_T (256 << 10)

typedef struct fill_task {
  const lm_gemm *g;
  const char *a;
  lm_gemm_fill fill;
  void *ctx;
  int64_t rows, cols, per; /* B's stored matrix, rows x cols; columns per block */
  int parts;
  char *scratch; /* [parts][rows * per] */
  char *c;       /* the product (B as is), or the parts' partial sums (transposed) */
} fill_task;

static void fill_part(void *ctx, int64_t begin, int64_t end) {
  const fill_task *t = ctx;
  const lm_gemm *g = t->g;
  size_t es = loom_dtype_size(g->dtype);
  int64_t blocks = (t->cols + t->per - 1) / t->per;
  for (int64_t q = begin; q < end; q++) {
    char *scratch = t->scratch + q * t->rows * t->per * (int64_t)es;
    char *partial = t->c + (g->b_trans && t->parts > 1 ? q * g->M * g->N * (int64_t)es : 0);
    for (int64_t j = blocks * q / t->parts; j < blocks * (q + 1) / t->parts; j++) {
      int64_t c0 = j * t->per, c1 = c0 + t->per < t->cols ? c0 + t->per : t->cols;
      t->fill(t->ctx, c0, c1, scratch);
      lm_gemm blk = *g;
      blk.ldb = c1 - c0;
      if (!g->b_trans) { /* columns [c0, c1) of the product */
        block(&blk, t->a, scratch, (part){0, g->M, 0, c1 - c0, 0, g->K}, t->c + c0 * (int64_t)es,
              g->N);
      } else { /* terms [c0, c1) of every output's sum */
        const char *a = t->a + (g->a_trans ? c0 * g->lda : c0) * (int64_t)es;
        block_beta(&blk, a, scratch, (part){0, g->M, 0, g->N, 0, c1 - c0}, partial, g->N,
                   j > blocks * q / t->parts);
      }
    }
  }
}

loom_status lm_run_gemm_filled(const lm_gemm *g, const void *a, lm_gemm_fill fill, void *ctx,
                               void *c) {
  size_t es = loom_dtype_size(g->dtype);
  int64_t rows = g->b_trans ? g->N : g->K, cols = g->b_trans ? g->K : g->N;
  if (g->M == 0 || g->N == 0) return LOOM_OK;
  if (rows == 0 || cols == 0) {
    memset(c, 0, (size_t)(g->M * g->N) * es);
    return LOOM_OK;
  }
  int64_t per = (g->b_trans ? FILL_BLOCK_BYTES_T : FILL_BLOCK_BYTES) /
                ((rows + g->M) * (int64_t)es); /* B's block and A's or C's */
  if (per < FILL_MIN_COLS) per = FILL_MIN_COLS;
  int64_t blocks = (cols + per - 1) / per;
  int parts = g->M * g->N * g->K < GEMM_PARALLEL_WORK ? 1 : loom_num_threads();
  if (parts > blocks) parts = (int)blocks;
  if (parts > 1 && blocks < 4 * parts) { /* smaller blocks, so that every thread has several */
    per = (cols + 4 * parts - 1) / (4 * parts);
    blocks = (cols + per - 1) / per;
  }
  size_t scratch_bytes = (size_t)parts * (size_t)(rows * per) * es;
  size_t partial_bytes = g->b_trans && parts > 1 ? (size_t)parts * (size_t)(g->M * g->N) * es : 0;
  char *scratch = lm_buffer_alloc(scratch_bytes + partial_bytes);
  if (!scratch) return lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory for a GEMM's B blocks");
  lm_blas_single_threaded();
  fill_task t = {g,    a,   fill,  ctx,     rows,
                 cols, per, parts, scratch, partial_bytes ? scratch + scratch_bytes : c};
  lm_parallel_for(parts, parts, fill_part, &t);
  if (partial_bytes) add_partials(g, t.c, parts, g->M * g->N, c);
  lm_buffer_free(scratch, scratch_bytes + partial_bytes);
  return LOOM_OK;
}

/* ------------------------------------------------------------ choosing */

/* Which GEMM runs, from LOOM_GEMM (auto when unset or empty) and, under auto,
 * OpenBLAS's kernels: narrower than the CPU's vectors, loom's generated ones
 * run 1.3-1.9x faster (docs/gemm.md, "OpenBLAS's kernels"). */
typedef enum gemm_mode { GEMM_AUTO, GEMM_LOOM, GEMM_BLAS, GEMM_BAD, GEMM_AUTO_NARROW } gemm_mode;
static gemm_mode gemm_mode_set(void) {
  const char *force = getenv("LOOM_GEMM");
  if (!force || !*force || strcmp(force, "auto") == 0)
    return lm_blas_narrow_here() ? GEMM_AUTO_NARROW : GEMM_AUTO;
  return strcmp(force, "loom") == 0 ? GEMM_LOOM : strcmp(force, "blas") == 0 ? GEMM_BLAS : GEMM_BAD;
}

const char *loom_gemm_choice(const char **why) {
  static const char *const whys[] = {
      "LOOM_GEMM=auto: loom's for products of a few rows and wide blocks of few rows, "
      "OpenBLAS for the rest",
      "LOOM_GEMM=loom", "LOOM_GEMM=blas",
      "LOOM_GEMM is not loom, blas or auto: matrix products fail with LOOM_ERR_VALUE",
      "LOOM_GEMM=auto: OpenBLAS runs kernels with narrower vectors than this CPU's "
      "(see blas), so loom's takes every product"};
  static const char *const names[] = {"auto", "loom", "blas", "invalid", "loom"};
  gemm_mode m = gemm_mode_set();
  if (why) *why = whys[m];
  return names[m];
}

loom_status lm_gemm_prepare(lm_gemm *g, lm_code **code) {
  g->fn = NULL;
  *code = NULL;
  g->fn_for_all = false;
  gemm_mode mode = gemm_mode_set();
  bool all = mode == GEMM_LOOM || mode == GEMM_AUTO_NARROW, none = mode == GEMM_BLAS;
  if (mode == GEMM_BAD)
    return lm_fail(LOOM_ERR_VALUE, "loom_realize: LOOM_GEMM=%s: expected loom, blas or auto",
                   getenv("LOOM_GEMM"));
  /* BLAS has no products of BF16 / F16: loom's takes them whatever LOOM_GEMM says */
  bool widened = g->in_dtype != g->dtype;
  if (none && !widened) return LOOM_OK;
  g->fn_for_all = all || widened;
  lm_gemm_tile_for(g->in_dtype, g->M, g->N, &g->tile);
  return lm_gemm_function(&g->tile, &g->fn, code);
}
