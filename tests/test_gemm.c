/* loom's own GEMM (backends/llvm/gemm.c through runtime/gemm.c) against
 * double-precision loops.
 *
 * The block function itself, called directly with blockings small enough
 * that every loop around the microkernel runs several times with partial
 * slivers (m, n, k from 1 to 67 and 200+, each operand row-major, transposed
 * or with a longer row stride, accumulating or not: C is NaN beforehand
 * when it must not be read, and the elements beside the product must stay
 * as they were); then matmul through the public API for every shape class
 * (square, tall-skinny, K = 1, M = 1, N = 1, transposed views, batched,
 * broadcast batch, F64), NaN and Inf propagating as BLAS's, on 1 to 4
 * threads. CTest runs the second half again with LOOM_GEMM=blas. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/llvm/llvm_backend.h"
#include "check.h"
#include "ir/kernel.h"
#include "loom.h"
#include "runtime/compile.h"

static double value_at(unsigned seed, int64_t i) {
  uint64_t x = (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31, x *= 0x94D049BB133111EBull, x ^= x >> 29;
  return (double)(x >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
}

static void put(loom_dtype dt, void *m, int64_t i, double v) {
  if (dt == LOOM_F32)
    ((float *)m)[i] = (float)v;
  else if (dt == LOOM_BF16)
    ((uint16_t *)m)[i] = loom_float_to_bf16((float)v);
  else if (dt == LOOM_F16)
    ((uint16_t *)m)[i] = loom_float_to_f16((float)v);
  else
    ((double *)m)[i] = v;
}

static void *matrix(loom_dtype dt, int64_t count, unsigned seed) {
  size_t es = loom_dtype_size(dt);
  void *m = malloc((size_t)(count > 0 ? count : 1) * es);
  for (int64_t i = 0; i < count; i++) put(dt, m, i, value_at(seed, i));
  return m;
}

static double get(loom_dtype dt, const void *m, int64_t i) {
  if (dt == LOOM_BF16) return loom_bf16_to_float(((const uint16_t *)m)[i]);
  if (dt == LOOM_F16) return loom_f16_to_float(((const uint16_t *)m)[i]);
  return dt == LOOM_F32 ? (double)((const float *)m)[i] : ((const double *)m)[i];
}

/* ------------------------------------------------------------ the block function */

typedef struct layout {
  int64_t m, n, k;
  bool a_trans, b_trans;
  int64_t pad; /* extra elements per stored row of A, B and C */
  bool accumulate;
  int64_t mc, kc, nc;
  bool in_place; /* lk_gemm_args.b_in_place: B's whole slivers read where they are */
  bool by_table; /* lk_gemm_args.b_rows: B's rows stored in another order (B not
                    transposed), found through a table of their offsets */
} layout;

/* A and B of the tile's in_dtype, C of its dtype */
static void run_block(lk_gemm_fn fn, const lk_gemm *tile, layout l) {
  loom_dtype dt = tile->dtype, in = tile->in_dtype;
  int64_t m = l.m, n = l.n, k = l.k;
  /* stored matrices: A m x k (or k x m), B k x n (or n x k), C m x n, rows padded */
  int64_t a_rows = l.a_trans ? k : m, a_cols = (l.a_trans ? m : k) + l.pad;
  int64_t b_rows = l.b_trans ? n : k, b_cols = (l.b_trans ? k : n) + l.pad;
  int64_t ldc = n + l.pad;
  void *a = matrix(in, a_rows * a_cols, 1), *b = matrix(in, b_rows * b_cols, 2);
  void *c = matrix(dt, m * ldc, 3), *before = matrix(dt, m * ldc, 3);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n && !l.accumulate; j++) put(dt, c, i * ldc + j, NAN);
  size_t bytes = lk_gemm_pack_bytes(tile, l.mc, l.kc, l.nc);
  void *pack = aligned_alloc(64, (bytes + 63) / 64 * 64);
  /* by table: B's row p stored as row (p * 7 + 3) % k, which visits every row
   * when 7 does not divide k, else as row k - 1 - p */
  bool by_table = l.by_table && !l.b_trans && k > 0;
  int64_t *rows = malloc(sizeof *rows * (size_t)(k > 0 ? k : 1));
  for (int64_t p = 0; p < k; p++) rows[p] = (k % 7 ? (p * 7 + 3) % k : k - 1 - p) * b_cols;
  lk_gemm_args args = {.m = m,
                       .n = n,
                       .k = k,
                       .a = a,
                       .a_row = l.a_trans ? 1 : a_cols,
                       .a_col = l.a_trans ? a_cols : 1,
                       .b = b,
                       .b_row = l.b_trans ? 1 : b_cols,
                       .b_col = l.b_trans ? b_cols : 1,
                       .c = c,
                       .ldc = ldc,
                       .accumulate = l.accumulate,
                       .mc = l.mc,
                       .kc = l.kc,
                       .nc = l.nc,
                       .pack = pack,
                       .b_in_place = l.in_place};
  if (by_table) args.b_row = 0, args.b_rows = rows;
  fn(&args);
  int bad = 0;
  for (int64_t i = 0; i < m && bad < 3; i++)
    for (int64_t j = 0; j < ldc && bad < 3; j++) {
      double got = get(dt, c, i * ldc + j), old = get(dt, before, i * ldc + j);
      if (j >= n) { /* beside the product */
        if (got != old) {
          bad++;
          check_fail_at(__FILE__, __LINE__, "C[%lld][%lld] beside the product changed",
                        (long long)i, (long long)j);
        }
        continue;
      }
      double want = l.accumulate ? old : 0, sumabs = fabs(want);
      for (int64_t p = 0; p < k; p++) {
        double x = get(in, a, l.a_trans ? p * a_cols + i : i * a_cols + p);
        double y = get(in, b, l.b_trans ? j * b_cols + p : by_table ? rows[p] + j : p * b_cols + j);
        want += x * y, sumabs += fabs(x * y);
      }
      double tol = check_sum_bound(dt == LOOM_F32, (double)k + 1, sumabs);
      if (!(fabs(got - want) <= tol)) {
        bad++;
        check_fail_at(__FILE__, __LINE__,
                      "%s%s %lldx%lldx%lld ta=%d tb=%d pad=%lld acc=%d table=%d blocks "
                      "%lld/%lld/%lld: C[%lld][%lld] = %.9g, want %.9g",
                      loom_dtype_name(in),
                      tile->amx         ? " (AMX)"
                      : tile->dot_pairs ? " (pairs)"
                                        : "",
                      (long long)m, (long long)n, (long long)k, l.a_trans, l.b_trans,
                      (long long)l.pad, l.accumulate, by_table, (long long)l.mc, (long long)l.kc,
                      (long long)l.nc, (long long)i, (long long)j, got, want);
      }
    }
  if (!bad) check_passes++;
  free(a), free(b), free(c), free(before), free(pack), free(rows);
}

/* Every tile the host has for operands of dt (with pairs: BF16's native
 * pair-product tile, AMX's when amx and this process may use it, else
 * AVX512-BF16's), B packed and read in place. */
static void test_block_function(loom_dtype dt, bool pairs, bool amx) {
  if (amx && !lm_cpu_amx_usable(NULL)) return;
  if (pairs && !amx && !lm_llvm_has_avx512_bf16()) return;
  lk_gemm tiles[LM_GEMM_MAX_TILES];
  int ntiles = lm_llvm_gemm_tiles(dt, pairs, amx, tiles, NULL);
  if (pairs && dt == LOOM_BF16)
    CHECK(ntiles == 1 && tiles[0].amx == amx && tiles[0].dot_pairs == !amx);
  for (int ti = 0; ti < ntiles; ti++) {
    const lk_gemm tile = tiles[ti];
    lk_gemm_fn fn = NULL;
    lm_code *code = NULL;
    if (lm_gemm_function(&tile, &fn, &code) != LOOM_OK || !fn) {
      check_fail_at(__FILE__, __LINE__, "no GEMM block function for %s %dx%d: %s",
                    loom_dtype_name(dt), tile.mr, tile.nr, loom_last_error());
      continue;
    }
    int64_t mr = tile.mr, nr = tile.nr;
    /* sizes around the tile and past it */
    const int64_t sizes[] = {1, 2, 3, mr - 1, mr, mr + 1, nr - 1, nr + 1, 2 * nr + 3, 67};
    const int nsizes = (int)(sizeof sizes / sizeof sizes[0]);
    unsigned pick = 7;
    for (int t = 0; t < 120; t++) {
      pick = pick * 1103515245u + 12345u;
      layout l = {.m = sizes[(pick >> 8) % nsizes],
                  .n = sizes[(pick >> 12) % nsizes],
                  .k = sizes[(pick >> 16) % nsizes],
                  .a_trans = (pick >> 20) & 1,
                  .b_trans = (pick >> 21) & 1,
                  .pad = (pick >> 22) & 1 ? 3 : 0,
                  .accumulate = (pick >> 23) & 1,
                  .in_place = (pick >> 30) & 1,
                  .by_table = !lk_gemm_paired(&tile) && (pick >> 31) & 1};
      /* blocks: whole, or a few rows / terms / columns at a time */
      l.mc = (pick >> 24) & 1 ? l.m : (int64_t)(1 + (pick >> 25) % (unsigned)(2 * mr));
      l.kc = (pick >> 26) & 1 ? l.k : (int64_t)(1 + (pick >> 27) % 9u);
      l.nc = (pick >> 28) & 1 ? l.n : (int64_t)(1 + (pick >> 29) % (unsigned)(2 * nr));
      run_block(fn, &tile, l);
    }
    for (int in_place = 0; in_place < 2; in_place++) {
      /* larger, with the runtime's kind of blocking */
      run_block(fn, &tile,
                (layout){203, 517, 301, false, false, 0, false, 84, 96, 256, in_place, false});
      run_block(fn, &tile,
                (layout){203, 517, 301, true, true, 5, true, 84, 96, 256, in_place, false});
      run_block(
          fn, &tile,
          (layout){32, 2 * nr + 5, 144, false, false, 3, false, 32, 144, 4096, in_place, false});
      /* a few rows against B's rows (swept unpacked, lk_gemm_swept): whole
       * blocks of columns and a masked last one, each row count */
      for (int64_t m = 1; m <= LK_GEMM_DOT_MAX_ROWS + 1; m++)
        for (int64_t n = 1; n <= 301; n += 150)
          run_block(fn, &tile,
                    (layout){m, n + 129 * (m & 1), 1 + 150 * (n > 1), m == 2, false, 3 * (m & 1),
                             m >= 3, m, 64, n + 129, in_place, false});
      /* B's rows through a table (a convolution's windows), in place asked for
       * and refused: whole and partial slivers, several blocks of terms */
      if (!lk_gemm_paired(&tile)) {
        layout t = {203, 517, 301, false, false, 3, false, 84, 96, 256, in_place, true};
        run_block(fn, &tile, t);
        t.m = 64, t.n = 3 * nr + 1, t.k = 576, t.accumulate = true, t.mc = 64, t.kc = 256;
        run_block(fn, &tile, t);
        t.m = 2, t.n = 40, t.k = 9, t.mc = 2, t.kc = 9, t.nc = 40; /* few rows: packed too */
        run_block(fn, &tile, t);
      }
      /* no terms: C = 0, or left as it is */
      run_block(fn, &tile, (layout){5, 7, 0, false, false, 1, false, 5, 1, 7, in_place, false});
      run_block(fn, &tile, (layout){5, 7, 0, false, true, 1, true, 5, 1, 7, in_place, false});
    }
    lm_code_release(code);
  }
}

/* The tile for a product's shape: the least padding, priced by each tile's
 * speed (backends/llvm/gemm.c). */
static void test_tile_choice(void) {
  lk_gemm tiles[LM_GEMM_MAX_TILES], t;
  int ntiles = lm_llvm_gemm_tiles(LOOM_F32, false, false, tiles, NULL);
  lm_gemm_tile_for(LOOM_F32, 1024, 1024, &t);
  CHECK(t.mr == tiles[0].mr && t.nr == tiles[0].nr); /* large: the first */
  /* BF16: AMX where this process may use it, else AVX512-BF16's pair
   * products where the CPU has them, but neither for a few rows */
  lm_gemm_tile_for(LOOM_BF16, 1024, 1024, &t);
  bool amx = lm_cpu_amx_usable(NULL);
  CHECK(t.amx == amx && t.in_dtype == LOOM_BF16 && t.dtype == LOOM_F32);
  CHECK(t.dot_pairs == (!amx && lm_llvm_has_avx512_bf16()));
  lm_gemm_tile_for(LOOM_BF16, LK_GEMM_DOT_MAX_ROWS, 3072, &t);
  CHECK(!t.amx && !t.dot_pairs && t.in_dtype == LOOM_BF16);
  lm_gemm_tile_for(LOOM_F16, 1024, 1024, &t);
  CHECK(!t.amx && !t.dot_pairs && t.in_dtype == LOOM_F16 && t.dtype == LOOM_F32);
  if (ntiles < 3) return;
  lm_gemm_tile_for(LOOM_F32, 32, 1568, &t); /* rows a multiple of 8 */
  CHECK_EQ_INT(t.mr, 8);
  lm_gemm_tile_for(LOOM_F32, 1568, 10, &t); /* narrow */
  CHECK_EQ_INT(t.nr, tiles[2].nr);
}

/* ------------------------------------------------------------ through matmul */

/* loom_matmul(a, b) against loops over the operands as given: a [.., M, K]
 * (stored transposed when a_t), b [.., K, N] likewise, batch dims broadcast. */
typedef struct mm_case {
  int64_t batch_a, batch_b; /* 0: no batch dim */
  int64_t m, n, k;
  bool a_t, b_t;
  loom_dtype dt;
} mm_case;

static void run_matmul(mm_case c) {
  LOOM_SCOPE {
    int64_t ba = c.batch_a ? c.batch_a : 1, bb = c.batch_b ? c.batch_b : 1;
    int64_t batch = ba > bb ? ba : bb;
    void *av = matrix(c.dt, ba * c.m * c.k, 11), *bv = matrix(c.dt, bb * c.k * c.n, 12);
    /* stored shapes: the transposed ones have their last two dims swapped */
    loom_shape as = c.batch_a ? LOOM_SHAPE(c.batch_a, c.a_t ? c.k : c.m, c.a_t ? c.m : c.k)
                              : LOOM_SHAPE(c.a_t ? c.k : c.m, c.a_t ? c.m : c.k);
    loom_shape bs = c.batch_b ? LOOM_SHAPE(c.batch_b, c.b_t ? c.n : c.k, c.b_t ? c.k : c.n)
                              : LOOM_SHAPE(c.b_t ? c.n : c.k, c.b_t ? c.k : c.n);
    loom_tensor *a = loom_from_data(av, as, c.dt, LOOM_CPU);
    loom_tensor *b = loom_from_data(bv, bs, c.dt, LOOM_CPU);
    if (c.a_t) a = loom_transpose(a, -2, -1);
    if (c.b_t) b = loom_transpose(b, -2, -1);
    loom_tensor *y = loom_cast(loom_matmul(a, b), LOOM_F64);
    int64_t count = batch * c.m * c.n;
    double *got = malloc(sizeof(double) * (size_t)(count ? count : 1));
    loom_status st = loom_copy_to_host(y, got, sizeof(double) * (size_t)count);
    CHECK_MSG(st == LOOM_OK, "matmul %lldx%lldx%lld: %s", (long long)c.m, (long long)c.n,
              (long long)c.k, loom_last_error());
    int bad = 0;
    for (int64_t q = 0; q < batch && st == LOOM_OK && bad < 3; q++)
      for (int64_t i = 0; i < c.m && bad < 3; i++)
        for (int64_t j = 0; j < c.n && bad < 3; j++) {
          const int64_t qa = ba == 1 ? 0 : q, qb = bb == 1 ? 0 : q;
          double want = 0, sumabs = 0;
          for (int64_t p = 0; p < c.k; p++) {
            int64_t ai = qa * c.m * c.k + (c.a_t ? p * c.m + i : i * c.k + p);
            int64_t bi = qb * c.k * c.n + (c.b_t ? j * c.k + p : p * c.n + j);
            double x = get(c.dt, av, ai) * get(c.dt, bv, bi);
            want += x, sumabs += fabs(x);
          }
          double v = got[(q * c.m + i) * c.n + j];
          bool half = c.dt == LOOM_BF16 || c.dt == LOOM_F16;
          double tol = check_sum_bound(c.dt != LOOM_F64, (double)c.k, sumabs);
          /* F32 sums of halves, rounded once to the half */
          if (half) tol += fabs(want) * (c.dt == LOOM_BF16 ? 0x1p-8 : 0x1p-11) + 0x1p-24;
          if (!(fabs(v - want) <= tol)) {
            bad++;
            check_fail_at(__FILE__, __LINE__,
                          "matmul %s batch %lld/%lld %lldx%lldx%lld a_t=%d b_t=%d threads %d: "
                          "[%lld][%lld][%lld] = %.9g, want %.9g",
                          loom_dtype_name(c.dt), (long long)c.batch_a, (long long)c.batch_b,
                          (long long)c.m, (long long)c.n, (long long)c.k, c.a_t, c.b_t,
                          loom_num_threads(), (long long)q, (long long)i, (long long)j, v, want);
          }
        }
    if (!bad) check_passes++;
    free(got), free(av), free(bv);
  }
}

static void test_shapes(void) {
  const mm_case cases[] = {
      {0, 0, 256, 256, 256, false, false, LOOM_F32}, /* square */
      {0, 0, 1000, 3, 500, false, false, LOOM_F32},  /* tall-skinny */
      {0, 0, 3, 700, 900, false, true, LOOM_F32},    /* short and wide, a weight */
      {0, 0, 40, 4000, 9, true, false, LOOM_F32},    /* few rows, many columns */
      {0, 0, 33, 37, 5000, false, false, LOOM_F32},  /* few outputs, a long sum */
      {0, 0, 70, 80, 1, false, false, LOOM_F32},     /* K = 1 */
      {0, 0, 1, 768, 300, false, true, LOOM_F32},    /* M = 1 */
      {0, 0, 1, 2304, 768, false, false, LOOM_F32},  /* M = 1 against [in, out]: a GEMV */
      {0, 0, 1, 700, 300, true, false, LOOM_F32},    /* M = 1, A's row strided */
      {0, 0, 1, 1000, 300, false, false, LOOM_F64},  /* M = 1, F64 */
      {4, 0, 1, 600, 500, false, false, LOOM_F32},   /* one row per batch, a shared weight */
      /* batches too small to split, run side by side: decoding's attention */
      {12, 12, 1, 1024, 64, false, true, LOOM_F32},
      {12, 12, 1, 64, 1024, false, false, LOOM_F32},
      {5, 5, 1, 513, 77, false, true, LOOM_F64},
      {0, 0, 300, 1, 200, false, false, LOOM_F32},  /* N = 1 */
      {0, 0, 67, 61, 59, true, true, LOOM_F32},     /* odd, both transposed */
      {4, 4, 33, 29, 17, false, false, LOOM_F32},   /* batched */
      {4, 0, 33, 29, 17, false, true, LOOM_F32},    /* a shared weight */
      {1, 5, 19, 23, 31, true, false, LOOM_F32},    /* a broadcast batch */
      {0, 0, 130, 129, 131, false, true, LOOM_F64}, /* F64 */
      {3, 3, 45, 50, 60, true, false, LOOM_F64},    /* F64 batched */
      /* BF16 (on AMX tiles where the CPU has them) and F16, F32 sums */
      {0, 0, 256, 256, 256, false, false, LOOM_BF16},
      {0, 0, 1000, 3, 500, false, false, LOOM_BF16},
      {0, 0, 3, 700, 900, false, true, LOOM_BF16},
      {0, 0, 40, 4000, 9, true, false, LOOM_BF16},
      {0, 0, 33, 37, 5000, false, false, LOOM_BF16},
      {0, 0, 70, 80, 1, false, false, LOOM_BF16},
      {0, 0, 1, 768, 300, false, true, LOOM_BF16},
      {0, 0, 1, 2304, 768, false, false, LOOM_BF16},
      {0, 0, 300, 1, 200, false, false, LOOM_BF16},
      {0, 0, 67, 61, 59, true, true, LOOM_BF16},
      {4, 4, 33, 29, 17, false, false, LOOM_BF16},
      {4, 0, 33, 29, 17, false, true, LOOM_BF16},
      {1, 5, 19, 23, 31, true, false, LOOM_BF16},
      {0, 0, 200, 300, 100, false, false, LOOM_F16},
      {0, 0, 1, 768, 300, false, true, LOOM_F16},
      {0, 0, 67, 61, 59, true, true, LOOM_F16},
      {4, 0, 33, 29, 17, false, true, LOOM_F16},
  };
  for (int t = 1; t <= 4; t++) {
    loom_set_num_threads(t);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_matmul(cases[i]);
  }
  loom_set_num_threads(0);
  /* odd sizes 1..67 */
  for (int64_t s = 1; s <= 67; s += 3) {
    run_matmul((mm_case){0, 0, s, 68 - s, (s * 7) % 67 + 1, false, false, LOOM_F32});
    run_matmul((mm_case){0, 0, 68 - s, s, (s * 5) % 67 + 1, true, true, LOOM_F32});
  }
}

/* A NaN in A's row i makes C's row i NaN; an Inf times a zero is NaN, an Inf
 * times a nonzero Inf; as BLAS and PyTorch give them (and AMX's BF16 tiles). */
static void test_nan_inf(loom_dtype dt) {
  LOOM_SCOPE {
    int64_t m = 20, k = 30, n = 40;
    void *a = matrix(dt, m * k, 21), *b = matrix(dt, k * n, 22);
    put(dt, a, 3 * k + 7, NAN);
    put(dt, a, 5 * k + 2, INFINITY);
    for (int64_t j = 0; j < n; j++) put(dt, b, 2 * n + j, j == 11 ? 0.0 : 1.0);
    float *c = malloc(sizeof(float) * (size_t)(m * n));
    loom_tensor *y = loom_matmul(loom_from_data(a, LOOM_SHAPE(m, k), dt, LOOM_CPU),
                                 loom_from_data(b, LOOM_SHAPE(k, n), dt, LOOM_CPU));
    CHECK(loom_copy_to_host(loom_cast(y, LOOM_F32), c, sizeof(float) * (size_t)(m * n)) == LOOM_OK);
    int row3 = 0, row5_nan = 0, row5_inf = 0, others = 0;
    for (int64_t j = 0; j < n; j++) {
      row3 += isnan(c[3 * n + j]) != 0;
      row5_nan += isnan(c[5 * n + j]) != 0;
      row5_inf += isinf(c[5 * n + j]) != 0;
      for (int64_t i = 0; i < m; i++) others += i != 3 && i != 5 && !isfinite(c[i * n + j]);
    }
    CHECK_EQ_INT(row3, n);
    CHECK_EQ_INT(row5_nan, 1); /* Inf * 0 in column 11 */
    CHECK_EQ_INT(row5_inf, n - 1);
    CHECK_EQ_INT(others, 0);
    free(a), free(b), free(c);
  }
}

int main(void) {
  test_tile_choice();
  test_block_function(LOOM_F32, false, false);
  test_block_function(LOOM_F64, false, false);
  test_block_function(LOOM_BF16, false, false);
  test_block_function(LOOM_F16, false, false);
  test_block_function(LOOM_BF16, true, false);
  test_block_function(LOOM_BF16, true, true);
  test_shapes();
  test_nan_inf(LOOM_F32);
  test_nan_inf(LOOM_BF16);
  return check_report();
}
