/*
 * The GEMM steps of an exported library (io/export_source.c copies this
 * file after thread_pool.c, defining its numbers: ir/kernel.h's LK_GEMM_*,
 * and EXPORT_GEMM_*, runtime/gemm.c's choices): loom's block functions
 * (object code from its LLVM backend, one per tile, declared after this)
 * over the pool.
 * gemm_blocking is runtime/gemm.c's lm_gemm_blocking and ir/kernel.h's
 * lk_gemm_b_in_place, from the limits lm_gemm_block_limits gives for each
 * tile (struct gemm_tile, written per step); gemm_unpacked is ir/kernel.h's
 * lk_gemm_unpacked.
 */
#ifndef LOOM_EXPORT_THREAD_POOL /* an export writes it first */
#include "thread_pool.c"
#endif

#include <stdint.h>

/* A block function's argument: ir/kernel.h's lk_gemm_args. C = A @ B. */
struct gemm_args {
  int64_t m, n, k;
  const void *a;
  int64_t a_row, a_col;
  const void *b;
  int64_t b_row, b_col;
  void *c;
  int64_t ldc, accumulate, mc, kc, nc;
  void *pack;
  int64_t b_in_place;
  const int64_t *b_rows; /* always NULL here: B's rows are strided */
};

struct gemm_job {
  void (*fn)(const struct gemm_args *args);
  const struct gemm_args *args;
  int in_element, element, by_rows; /* A's and B's bytes, C's */
  unsigned char *pack;
  int64_t pack_stride;
};

/* rows (or columns) [m * part / parts, m * (part + 1) / parts) of C */
static void gemm_part(const void *job, int part, int parts) {
  const struct gemm_job *g = job;
  struct gemm_args a = *g->args;
  int64_t m = g->by_rows ? a.m : a.n, lo = m * part / parts, hi = m * (part + 1) / parts;
  if (hi <= lo) return;
  if (g->by_rows) {
    a.m = hi - lo;
    a.a = (const char *)a.a + lo * a.a_row * g->in_element;
    a.c = (char *)a.c + lo * a.ldc * g->element;
  } else {
    a.n = hi - lo;
    a.b = (const char *)a.b + lo * a.b_col * g->in_element;
    a.c = (char *)a.c + lo * g->element;
  }
  a.pack = g->pack + part * g->pack_stride;
  g->fn(&a);
}

struct gemm_tile {
  int64_t mr, kb, mb, nb, room, in_element, paired, same_dtype;
};

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The blocks of a product (BLIS's loops): A in mc x kc, B in kc x nc. */
static void gemm_blocking(const struct gemm_tile *t, struct gemm_args *a) {
  a->nc = clamp64(a->n, 1, t->nb);
  if (t->paired) { /* the sum in equal blocks of whole steps of LK_GEMM_AMX_K */
    int64_t blocks = (a->k + t->kb - 1) / t->kb;
    blocks = blocks > 0 ? blocks : 1;
    a->kc =
        clamp64(((a->k + blocks - 1) / blocks + LK_GEMM_AMX_K - 1) / LK_GEMM_AMX_K * LK_GEMM_AMX_K,
                LK_GEMM_AMX_K, 1024);
    int64_t mb = clamp64(t->room / (a->kc * t->in_element) / t->mr * t->mr, t->mr, 4096);
    a->mc = clamp64(a->m, 1, mb);
  } else {
    a->mc = clamp64(a->m, 1, t->mb);
    a->kc = clamp64(a->k, 1, t->kb);
  }
  a->b_in_place = a->b_col == 1 && t->same_dtype && !t->paired &&
                  ((a->m + t->mr - 1) / t->mr <= LK_GEMM_IN_PLACE_MAX_TILES ||
                   a->kc <= LK_GEMM_IN_PLACE_SHORT_KC);
}

/* ir/kernel.h's lk_gemm_unpacked: the block function's path for each output
 * a dot product of unpacked operands */
static int gemm_unpacked(int64_t m, int64_t n, const struct gemm_args *a) {
  return a->a_col == 1 && a->b_row == 1 && a->k > 0 &&
         (m <= LK_GEMM_DOT_MAX_ROWS || m * n * LK_GEMM_DOT_TERMS_PER_OUTPUT <= a->k);
}

/* Parts of the rows (or columns), at least at_least each. Each output is
 * summed as the whole product's path sums it: a part of few outputs for its
 * sum would take the unpacked path where the whole is packed (its partial
 * sums are another order), so such a product takes fewer, larger parts. */
static int gemm_parts(const struct gemm_tile *t, const struct gemm_args *a, int by_rows,
                      int64_t at_least) {
  int64_t extent = by_rows ? a->m : a->n, n = extent / at_least;
  int parts = n < pool.threads ? (int)(n > 0 ? n : 1) : pool.threads;
  if (!t->paired && !gemm_unpacked(a->m, a->n, a))
    for (; parts > 1; parts--) {
      int64_t least = extent / parts; /* a part's fewest rows (columns) */
      if (!gemm_unpacked(by_rows ? least : a->m, by_rows ? a->n : least, a)) break;
    }
  return parts;
}

/* Rows over the pool (EXPORT_GEMM_MIN_ROWS or more a part), or columns
 * (EXPORT_GEMM_MIN_COLS or more) for few rows: each part packs into its own
 * panels. Below EXPORT_GEMM_PARALLEL_WORK multiply-adds, on this thread. */
static void run_gemm(void (*fn)(const struct gemm_args *args), const struct gemm_tile *tile,
                     const struct gemm_args *args, int in_element, int element, unsigned char *pack,
                     int64_t pack_stride) {
  if (args->m <= 0 || args->n <= 0) return;
  int by_rows = args->m >= 2 * EXPORT_GEMM_MIN_ROWS   ? 1
                : args->n >= 2 * EXPORT_GEMM_MIN_COLS ? 0
                                                      : -1;
  if (args->m * args->n * args->k < EXPORT_GEMM_PARALLEL_WORK || by_rows < 0) {
    fn(args);
    return;
  }
  const struct gemm_job job = {fn, args, in_element, element, by_rows, pack, pack_stride};
  run_parts(gemm_part, &job,
            gemm_parts(tile, args, by_rows, by_rows ? EXPORT_GEMM_MIN_ROWS : EXPORT_GEMM_MIN_COLS));
}
