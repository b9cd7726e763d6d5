/* A convolution's product read from its image: W [O, C*KH*KW] @ B, where B is
 * the im2col matrix [C*KH*KW, N*OH*OW] (lm_gemm_windows), without making B.
 *
 * For a block of output rows of one image, the input rows those windows
 * cover are copied once into a slab, zero-padded and split by stride phase:
 * slab[c][row phase][column phase][v][u] = xpad[c][(r0 + v) * sh + row
 * phase][u * sw + column phase]. In it, the window element of term p = (c,
 * kh, kw) at output (r, ow) is at rows[p] + (r - r0) * wq + ow, where
 * rows[p] holds c, the phases of kh * dh and kw * dw and their whole strides,
 * and wq is the slab's row length. So every term is a row of a matrix with
 * unit column stride whose row starts come from a table: loom's GEMM packs
 * such a B straight from the slab (lk_gemm_args.b_rows). The product is
 * computed wq columns an output row, ow from OW to wq being windows past the
 * image's right edge (at most (KW - 1) * dw / sw of them), and only the first
 * OW go to C. The slab is about the block's share of the image; im2col's
 * matrix was KH * KW times it. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/gemm.h"
#include "runtime/pool.h"
#include "runtime/runtime.h"

/* Columns of a block's product (output rows times wq): a panel of B the
 * microkernels sweep many times while A's blocks are packed once. */
#define WINDOWS_BLOCK_COLS 512
/* Below this many rows of C per thread the work splits by image rows only. */
#define WINDOWS_MIN_PART_ROWS 64

typedef struct windows_task {
  const lm_gemm *g;
  const char *a, *x;
  char *c;
  const int64_t *rows; /* per term, its row's start in the slab (v = 0) */
  int64_t wq, rq;      /* the slab's row length; its rows per phase */
  int64_t nph[2];      /* row and column phases present */
  int64_t phase_slot[2][64];
  int64_t per_block, blocks_per_image, mparts;
  _Atomic int failed;
} windows_task;

static int64_t phases_used(int64_t k, int64_t d, int64_t s, int64_t slot[64]) {
  int64_t n = 0;
  for (int64_t ph = 0; ph < s; ph++) slot[ph] = -1;
  for (int64_t t = 0; t < k; t++)
    if (slot[t * d % s] < 0) slot[t * d % s] = n++;
  return n;
}

/* The slab of image `img` from output row r0: every one of its rq rows, also
 * for a last, shorter block (the rows it does not read are then image rows
 * or zeros, never stale memory). */
static void fill_slab(const windows_task *t, int64_t img, int64_t r0, char *slab) {
  const lm_gemm_windows *v = &t->g->win;
  size_t es = loom_dtype_size(t->g->dtype);
  int64_t sh = v->stride[0], sw = v->stride[1];
  for (int64_t ch = 0; ch < v->c; ch++) {
    const char *plane = t->x + ((img * v->c + ch) * v->h * v->w) * (int64_t)es;
    for (int64_t ph = 0; ph < sh; ph++) {
      if (t->phase_slot[0][ph] < 0) continue;
      for (int64_t pw = 0; pw < sw; pw++) {
        if (t->phase_slot[1][pw] < 0) continue;
        int64_t at = ((ch * t->nph[0] + t->phase_slot[0][ph]) * t->nph[1] + t->phase_slot[1][pw]) *
                     t->rq * t->wq;
        for (int64_t vr = 0; vr < t->rq; vr++) {
          char *dst = slab + (at + vr * t->wq) * (int64_t)es;
          int64_t ih = (r0 + vr) * sh + ph - v->pad[0];
          if (ih < 0 || ih >= v->h) {
            memset(dst, 0, (size_t)t->wq * es);
            continue;
          }
          const char *src = plane + ih * v->w * (int64_t)es;
          /* u * sw + pw - pad inside [0, w) for u in [u0, u1) */
          int64_t first = v->pad[1] - pw, u0 = first > 0 ? (first + sw - 1) / sw : 0;
          int64_t u1 = (v->w - 1 + v->pad[1] - pw) / sw + 1;
          if (v->w - 1 + v->pad[1] - pw < 0) u1 = 0;
          if (u1 > t->wq) u1 = t->wq;
          if (u0 > u1) u0 = u1;
          memset(dst, 0, (size_t)u0 * es);
          if (sw == 1) {
            memcpy(dst + u0 * (int64_t)es, src + (u0 + pw - v->pad[1]) * (int64_t)es,
                   (size_t)(u1 - u0) * es);
          } else if (es == 4) {
            const float *s = (const float *)src;
            float *d = (float *)dst;
            for (int64_t u = u0; u < u1; u++) d[u] = s[u * sw + pw - v->pad[1]];
          } else {
            const double *s = (const double *)src;
            double *d = (double *)dst;
            for (int64_t u = u0; u < u1; u++) d[u] = s[u * sw + pw - v->pad[1]];
          }
          memset(dst + u1 * (int64_t)es, 0, (size_t)(t->wq - u1) * es);
        }
      }
    }
  }
}

/* The slab and, past its end, zeros for the windows past the last row's
 * right edge to read (they make only columns that are dropped). */
static size_t slab_bytes(const windows_task *t) {
  return (size_t)(t->g->win.c * t->nph[0] * t->nph[1] * t->rq * t->wq + t->wq) *
         loom_dtype_size(t->g->dtype);
}

/* Items [begin, end): item q is part q % mparts of C's rows for block q /
 * mparts (image, then row block). */
static void windows_part(void *ctx, int64_t begin, int64_t end) {
  windows_task *t = ctx;
  const lm_gemm *g = t->g;
  const lm_gemm_windows *v = &g->win;
  size_t es = loom_dtype_size(g->dtype);
  int64_t cols = t->per_block * t->wq, oh_ow = v->oh * v->ow;
  int64_t a_row, a_col, b_row, b_col;
  lm_gemm_strides(g, &a_row, &a_col, &b_row, &b_col);
  int64_t mc, kc, nc;
  lm_gemm_blocking(&g->tile, g->M, cols, g->K, &mc, &kc, &nc);
  size_t slab_size = slab_bytes(t), wide_size = (size_t)(g->M * cols) * es;
  size_t pack_size = lk_gemm_pack_bytes(&g->tile, mc, kc, nc);
  bool direct = t->wq == v->ow; /* no windows past the edge: C's rows as they are */
  size_t bytes = slab_size + (direct ? 0 : wide_size) + pack_size + 128;
  char *scratch = lm_buffer_alloc(bytes);
  if (!scratch) {
    atomic_store(&t->failed, 1);
    return;
  }
  char *slab = scratch, *wide = slab + (slab_size + 63) / 64 * 64;
  char *pack = wide + (direct ? 0 : (wide_size + 63) / 64 * 64);
  memset(slab + slab_size - (size_t)t->wq * es, 0, (size_t)t->wq * es);
  int64_t last_block = -1;
  for (int64_t q = begin; q < end; q++) {
    int64_t block = q / t->mparts, part = q % t->mparts;
    int64_t img = block / t->blocks_per_image, r0 = block % t->blocks_per_image * t->per_block;
    int64_t nrows = v->oh - r0 < t->per_block ? v->oh - r0 : t->per_block;
    int64_t m0 = g->M * part / t->mparts, m1 = g->M * (part + 1) / t->mparts;
    if (m1 <= m0) continue;
    if (block != last_block) fill_slab(t, img, r0, slab), last_block = block;
    char *out = t->c + (m0 * g->N + img * oh_ow + r0 * v->ow) * (int64_t)es;
    lk_gemm_args args = {.m = m1 - m0,
                         .n = nrows * t->wq,
                         .k = g->K,
                         .a = t->a + m0 * a_row * (int64_t)es,
                         .a_row = a_row,
                         .a_col = a_col,
                         .b = slab,
                         .b_row = 0,
                         .b_col = 1,
                         .c = direct ? out : wide,
                         .ldc = direct ? g->N : nrows * t->wq,
                         .mc = mc,
                         .kc = kc,
                         .nc = nc,
                         .pack = pack,
                         .b_rows = t->rows};
    g->fn(&args);
    lm_stat_add(LM_STAT_GEMM_CALLS, 1);
    for (int64_t i = 0; !direct && i < m1 - m0; i++)
      for (int64_t r = 0; r < nrows; r++)
        memcpy(out + (i * g->N + r * v->ow) * (int64_t)es,
               wide + (i * args.ldc + r * t->wq) * (int64_t)es, (size_t)v->ow * es);
  }
  lm_buffer_free(scratch, bytes);
}

bool lm_gemm_windows_usable(const lm_gemm *g) {
  const lm_gemm_windows *v = &g->win;
  return v->on && g->fn && !lk_gemm_paired(&g->tile) && g->in_dtype == g->dtype &&
         lm_gemm_batches(g) == 1 && v->stride[0] <= 64 && v->stride[1] <= 64 &&
         g->K == v->c * v->kh * v->kw && g->N == v->n * v->oh * v->ow;
}

loom_status lm_run_gemm_windows(const lm_gemm *g, const void *a, const void *x, void *c) {
  const lm_gemm_windows *v = &g->win;
  size_t es = loom_dtype_size(g->dtype);
  if (g->M == 0 || g->N == 0) return LOOM_OK;
  windows_task t = {.g = g, .x = x, .c = c};
  int64_t ao, bo;
  lm_gemm_batch_offsets(g, 0, &ao, &bo);
  t.a = (const char *)a + ao * (int64_t)es;
  int64_t sh = v->stride[0], sw = v->stride[1];
  t.nph[0] = phases_used(v->kh, v->dilation[0], sh, t.phase_slot[0]);
  t.nph[1] = phases_used(v->kw, v->dilation[1], sw, t.phase_slot[1]);
  t.wq = v->ow + (v->kw - 1) * v->dilation[1] / sw;
  t.per_block = (WINDOWS_BLOCK_COLS + t.wq - 1) / t.wq;
  if (t.per_block > v->oh) t.per_block = v->oh;
  t.blocks_per_image = (v->oh + t.per_block - 1) / t.per_block;
  int64_t blocks = v->n * t.blocks_per_image;
  int threads = g->M * g->N * g->K < (1 << 21) ? 1 : loom_num_threads();
  if (blocks < 2 * threads && g->M / threads >= WINDOWS_MIN_PART_ROWS) {
    /* too few row blocks for every thread: each also takes a part of C's rows */
    t.mparts = threads;
  } else {
    t.mparts = 1;
  }
  t.rq = t.per_block + (v->kh - 1) * v->dilation[0] / sh;
  int64_t *rows = malloc(sizeof *rows * (size_t)g->K);
  if (!rows) return lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory for a convolution's terms");
  for (int64_t ch = 0, p = 0; ch < v->c; ch++)
    for (int64_t kh = 0; kh < v->kh; kh++)
      for (int64_t kw = 0; kw < v->kw; kw++, p++) {
        int64_t dh = kh * v->dilation[0], dw = kw * v->dilation[1];
        int64_t plane =
            (ch * t.nph[0] + t.phase_slot[0][dh % sh]) * t.nph[1] + t.phase_slot[1][dw % sw];
        rows[p] = (plane * t.rq + dh / sh) * t.wq + dw / sw;
      }
  t.rows = rows;
  int64_t items = blocks * t.mparts;
  int parts = items < threads ? (int)items : threads;
  lm_parallel_for(items, parts, windows_part, &t);
  free(rows);
  lm_stat_add(LM_STAT_GEMMS_FROM_WINDOWS, 1);
  if (atomic_load(&t.failed))
    return lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory for a convolution's image rows");
  return LOOM_OK;
}
