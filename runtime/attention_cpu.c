/* Fused attention on the CPU: out = softmax(q k^T * scale + mask) v,
 * one block of query rows at a time over tiles of keys, with the softmax
 * computed online (a running max and sum per row, the output rescaled when
 * the max grows), so no row of scores longer than a tile is ever stored;
 * and its backward (lm_attention_grad_f32), which recomputes the scores a
 * tile at a time instead of reading them back.
 *
 * This file is self-contained C (no loom header): it is compiled into the
 * library and its text is also written into exported libraries
 * (io/export_source.c), so an export computes attention with the same
 * code. Its entry point has a kernel's signature: args are {out, q, k, v,
 * int64 numbers (ATTN_* below), double scale, mask or NULL}, and [begin, end)
 * is a range of work items, each a block of ATTN_QROWS query rows of one batch
 * index. A mask is bool bytes (nonzero: attend) or floats added to the scaled
 * scores, [.., Tq, Tk] through strides. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* 64-byte vectors pass in registers only with AVX-512: every function taking
 * one is inlined, so no call ever passes one */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#define ATTN_QROWS 16 /* query rows of a block: one per lane of a 512-bit vector */
#define ATTN_KTILE 64 /* keys per tile: a multiple of the widest vector */
#define ATTN_MAX_HEAD 256
#define ATTN_MAX_BATCH 6
/* q, k, v, the mask, and for the backward the forward's output and its
 * gradient */
#define ATTN_OPERANDS 6
/* the numbers' positions (args[4]) */
enum {
  ATTN_NBATCH,
  ATTN_TQ,
  ATTN_TK,
  ATTN_D,
  ATTN_DV,
  ATTN_CAUSAL,
  ATTN_MASK,                                  /* 0 none, 1 bool, 2 added */
  ATTN_MASK_COL,                              /* the mask's stride along Tk */
  ATTN_OFFSET,                                /* ATTN_OPERANDS */
  ATTN_ROW = ATTN_OFFSET + ATTN_OPERANDS,     /* ATTN_OPERANDS */
  ATTN_BATCH = ATTN_ROW + ATTN_OPERANDS,      /* ATTN_MAX_BATCH */
  ATTN_BSTRIDE = ATTN_BATCH + ATTN_MAX_BATCH, /* ATTN_OPERANDS x ATTN_MAX_BATCH */
  ATTN_NUMBERS = ATTN_BSTRIDE + ATTN_OPERANDS * ATTN_MAX_BATCH
};

/* 16 floats: a 512-bit register with AVX-512, two with AVX2, four with SSE
 * (GCC's and clang's vector extension). */
typedef float attn_vf __attribute__((vector_size(64)));
typedef int32_t attn_vi __attribute__((vector_size(64)));
typedef uint32_t attn_vu __attribute__((vector_size(64)));
typedef float attn_vf_unaligned __attribute__((vector_size(64), aligned(4), may_alias));
#define ATTN_SPLAT(x) ((attn_vf){0} + (float)(x))
#define ATTN_INLINE static inline __attribute__((always_inline))
/* The loops over a group's U independent sums unrolled whole, so that their
 * accumulators live in registers: GCC unrolls them only at -O3, and exports
 * compile this text at -O2 (2.3x slower without). */
#define ATTN_UNROLL _Pragma("GCC unroll 16")

ATTN_INLINE attn_vf attn_load(const float *p) { return *(const attn_vf_unaligned *)p; }
ATTN_INLINE void attn_store(float *p, attn_vf v) { *(attn_vf_unaligned *)p = v; }
ATTN_INLINE attn_vf attn_select(attn_vi take, attn_vf a, attn_vf b) {
  return (attn_vf)((take & (attn_vi)a) | (~take & (attn_vi)b));
}
ATTN_INLINE attn_vf attn_max(attn_vf a, attn_vf b) { return attn_select(a > b, a, b); }

/* e^x for x <= 0 (scores less their row's max): 2^n * p(r) with x = n ln2 + r,
 * |r| <= ln2 / 2, p the Taylor polynomial of degree 6 (relative error ~2e-7,
 * about 2 float ulps). -inf (a masked score) and x below -87.3 give 0; NaN
 * stays. */
ATTN_INLINE attn_vf attn_exp(attn_vf x) {
  /* (NaN fails the comparison: no NaN reaches the conversion to integers) */
  attn_vf c = attn_select(x >= ATTN_SPLAT(-87.3f), x, ATTN_SPLAT(-87.3f));
  c = attn_select(c > ATTN_SPLAT(0), ATTN_SPLAT(0), c);
  attn_vi ni = __builtin_convertvector(c * 1.44269504f - 0.5f, attn_vi); /* toward 0: round */
  attn_vf n = __builtin_convertvector(ni, attn_vf);
  attn_vf r = c - n * 0.693145752f - n * 1.42860677e-6f;
  attn_vf p = ATTN_SPLAT(1.0f / 720);
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  attn_vf e = p * (attn_vf)((attn_vu)(ni + 127) << 23);
  e = attn_select(x < ATTN_SPLAT(-87.3f), ATTN_SPLAT(0), e);
  return attn_select(x != x, x, e);
}

ATTN_INLINE float attn_hmax(attn_vf v) {
  float m = v[0];
  for (int i = 1; i < 16; i++) m = v[i] > m ? v[i] : m;
  return m;
}

ATTN_INLINE float attn_hsum(attn_vf v) {
  float s = 0;
  for (int i = 0; i < 16; i++) s += v[i];
  return s;
}

/* Where batch index b's operands start (elements). */
ATTN_INLINE void attn_offsets(const int64_t *num, int64_t b, int64_t off[ATTN_OPERANDS]) {
  for (int s = 0; s < ATTN_OPERANDS; s++) off[s] = num[ATTN_OFFSET + s];
  for (int64_t at = b, x = num[ATTN_NBATCH] - 1; x >= 0; x--) { /* last batch dim fastest */
    int64_t size = num[ATTN_BATCH + x], i = at % size;
    at /= size;
    for (int s = 0; s < ATTN_OPERANDS; s++)
      off[s] += i * num[ATTN_BSTRIDE + s * ATTN_MAX_BATCH + x];
  }
}

/* The mask's term at `at`: 0, or -inf where a bool mask hides the key. */
ATTN_INLINE float attn_mask_at(const void *mask, int64_t how, int64_t at) {
  if (how == 1) return ((const unsigned char *)mask)[at] ? 0.0f : -INFINITY;
  return ((const float *)mask)[at];
}

/* GCC from 12 and clang shuffle generic vectors (exports compile this text
 * with the host's compiler): one row's scores then come from dot products
 * along the head, summed 16 keys at a time; without, from the key tile
 * transposed. */
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
#define ATTN_SHUFFLES 1
/* One level of attn_sum16: lanes of a and b in groups of h, a's and b's
 * groups interleaved, even groups plus odd ones. */
#define ATTN_HALVES(a, b, E, O)                                                                    \
  (__builtin_shufflevector(a, b, E) + __builtin_shufflevector(a, b, O))
#define ATTN_H8E 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define ATTN_H8O 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define ATTN_H4E 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define ATTN_H4O 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define ATTN_H2E 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define ATTN_H2O 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define ATTN_H1E 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define ATTN_H1O 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31

/* Lane u of the result: the sum of x[attn_rev4(u)]'s lanes (four levels of
 * halving; the levels leave their vectors' sums in bit-reversed order, so
 * the caller stores key u's partial sums at x[attn_rev4(u)]). */
ATTN_INLINE attn_vf attn_sum16(const attn_vf x[16]) {
  attn_vf y[8], z[4], w[2];
  ATTN_UNROLL
  for (int u = 0; u < 8; u++) y[u] = ATTN_HALVES(x[2 * u], x[2 * u + 1], ATTN_H8E, ATTN_H8O);
  ATTN_UNROLL
  for (int u = 0; u < 4; u++) z[u] = ATTN_HALVES(y[2 * u], y[2 * u + 1], ATTN_H4E, ATTN_H4O);
  ATTN_UNROLL
  for (int u = 0; u < 2; u++) w[u] = ATTN_HALVES(z[2 * u], z[2 * u + 1], ATTN_H2E, ATTN_H2O);
  return ATTN_HALVES(w[0], w[1], ATTN_H1E, ATTN_H1O);
}

ATTN_INLINE int attn_rev4(int u) {
  return (u & 1) << 3 | (u & 2) << 1 | (u & 4) >> 1 | (u & 8) >> 3;
}
#else
#define ATTN_SHUFFLES 0
#endif

/* s[j] = q . k_j for the tile's n keys (rows of k at kr), keys j >= n clamped
 * to the last: with shuffles and whole vectors along the head, each key's
 * dot product is a vector of partial sums, 16 keys' summed at once;
 * otherwise the tile is transposed (kt, d x ATTN_KTILE) and each lane a key. */
ATTN_INLINE void attn_tile_scores(float *s, float *kt, const float *qi, const float *k, int64_t kr,
                                  int64_t d, int64_t n) {
  enum { V = ATTN_KTILE / 16 };
#if ATTN_SHUFFLES
  if (d % 16 == 0) {
    for (int u0 = 0; u0 < V && 16 * u0 < n; u0++) {
      attn_vf part[16];
      ATTN_UNROLL
      for (int u = 0; u < 16; u++) {
        int64_t j = 16 * u0 + u;
        const float *kj = k + (j < n ? j : n - 1) * kr;
        attn_vf acc = ATTN_SPLAT(0);
        for (int64_t e = 0; e < d; e += 16) acc += attn_load(qi + e) * attn_load(kj + e);
        part[attn_rev4(u)] = acc;
      }
      attn_store(s + 16 * u0, attn_sum16(part));
    }
    return;
  }
#endif
  for (int64_t j = 0; j < ATTN_KTILE; j++) {
    const float *kj = k + (j < n ? j : n - 1) * kr;
    for (int64_t e = 0; e < d; e++) kt[e * ATTN_KTILE + j] = kj[e];
  }
  attn_vf sv[V] = {{0}};
  for (int64_t e = 0; e < d; e++)
    for (int u = 0; u < V; u++) sv[u] += qi[e] * attn_load(kt + e * ATTN_KTILE + 16 * u);
  for (int u = 0; u < V; u++) attn_store(s + 16 * u, sv[u]);
}

/* One query row i against every key it sees, a tile of keys at a time:
 * decoding's single rows. */
ATTN_INLINE void attn_row(float *dst, const float *q, const float *k, const float *v,
                          const void *mask, const int64_t *num, float scale,
                          const int64_t off[ATTN_OPERANDS], int64_t i) {
  enum { V = ATTN_KTILE / 16 };
  int64_t tk = num[ATTN_TK], d = num[ATTN_D], dv = num[ATTN_DV];
  int64_t kr = num[ATTN_ROW + 1], vr = num[ATTN_ROW + 2];
  int64_t mr = num[ATTN_ROW + 3], mc = num[ATTN_MASK_COL], how = mask ? num[ATTN_MASK] : 0;
  const float *qi = q + off[0] + i * num[ATTN_ROW];
  float kt[ATTN_MAX_HEAD * ATTN_KTILE]; /* the key tile transposed: kt[e * KTILE + j] */
  float acc[ATTN_MAX_HEAD], s[ATTN_KTILE], max = -INFINITY, sum = 0;
  for (int64_t e = 0; e < dv; e++) acc[e] = 0;
  int64_t keys = num[ATTN_CAUSAL] && i + 1 < tk ? i + 1 : tk;
  for (int64_t j0 = 0; j0 < keys; j0 += ATTN_KTILE) {
    int64_t n = keys - j0 < ATTN_KTILE ? keys - j0 : ATTN_KTILE;
    attn_tile_scores(s, kt, qi, k + off[1] + j0 * kr, kr, d, n);
    for (int64_t j = 0; j < n; j++) s[j] *= scale;
    for (int64_t j = n; j < ATTN_KTILE; j++) s[j] = -INFINITY;
    for (int64_t j = 0; how && j < n; j++)
      s[j] += attn_mask_at(mask, how, off[3] + i * mr + (j0 + j) * mc);
    attn_vf top = ATTN_SPLAT(-INFINITY);
    for (int u = 0; u < V; u++) top = attn_max(top, attn_load(s + 16 * u));
    float grown = attn_hmax(top);
    /* nothing to attend to in this tile (a row masked throughout ends with
       a sum of 0, and NaN, as softmax gives) */
    if (grown == -INFINITY) continue;
    grown = grown > max ? grown : max;
    attn_vf total = ATTN_SPLAT(0);
    for (int u = 0; u < V; u++) {
      attn_vf p = attn_exp(attn_load(s + 16 * u) - grown);
      attn_store(s + 16 * u, p);
      total += p;
    }
    /* the row's earlier terms, rescaled to the new max (none yet: 0) */
    float rescale = max == -INFINITY ? 0.0f : attn_exp(ATTN_SPLAT(max - grown))[0];
    sum = sum * rescale + attn_hsum(total);
    max = grown;
    for (int64_t e = 0; e < dv; e++) acc[e] *= rescale;
    for (int64_t j = 0; j < n; j++) {
      const float *vj = v + off[2] + (j0 + j) * vr;
      float p = s[j];
      for (int64_t e = 0; e < dv; e++) acc[e] += p * vj[e];
    }
  }
  float inv = 1.0f / sum;
  for (int64_t e = 0; e < dv; e++) dst[e] = acc[e] * inv;
}

/* st[j] = sum_e x[j][e] xt[e] for j < n, the rows x[j] at x + j * stride,
 * xt[e] one vector of the block's lanes per e < len: a tile's keys (or
 * values) against the block's rows, 8 at a time (8 independent sums hide the
 * adds' latency). */
ATTN_INLINE void attn_dots(attn_vf *st, const attn_vf *xt, const float *x, int64_t stride,
                           int64_t len, int64_t n) {
  enum { U = 8 };
  for (int64_t j = 0; j < n; j += U) {
    const float *xj[U];
    ATTN_UNROLL
    for (int u = 0; u < U; u++) xj[u] = x + (j + u < n ? j + u : n - 1) * stride;
    attn_vf sc[U] = {{0}};
    for (int64_t e = 0; e < len; e++) {
      attn_vf xe = xt[e];
      ATTN_UNROLL
      for (int u = 0; u < U; u++) sc[u] += xj[u][e] * xe;
    }
    for (int u = 0; u < U && j + u < n; u++) st[j + u] = sc[u];
  }
}

/* The scores of a block's rows [i0, i0 + rows), one per lane (q transposed
 * in qt), against one tile's keys [j0, j0 + n): st[j][r] = q_r . k_j * scale
 * plus the mask, -inf where the row does not see the key (causal), past the
 * tile's keys and in lanes past the block's rows. */
ATTN_INLINE void attn_block_scores(attn_vf st[ATTN_KTILE], const attn_vf *qt, const float *k,
                                   const void *mask, const int64_t *num, float scale,
                                   const int64_t off[ATTN_OPERANDS], int64_t i0, int64_t rows,
                                   int64_t j0, int64_t n) {
  int64_t mr = num[ATTN_ROW + 3], mc = num[ATTN_MASK_COL], how = mask ? num[ATTN_MASK] : 0;
  int causal = num[ATTN_CAUSAL] != 0;
  attn_vi lane;
  for (int r = 0; r < 16; r++) lane[r] = r;
  attn_vi past_rows = lane >= (attn_vi){0} + (int32_t)rows;
  attn_dots(st, qt, k + off[1] + j0 * num[ATTN_ROW + 1], num[ATTN_ROW + 1], num[ATTN_D], n);
  for (int64_t j = 0; j < ATTN_KTILE; j++) { /* what each row does not see */
    attn_vi hidden = j >= n ? ~(attn_vi){0} : past_rows;
    int64_t ahead = j0 + j - i0; /* key j0 + j is after query i0 + r where ahead > r */
    if (causal) hidden |= ((attn_vi){0} + (int32_t)(ahead < 16 ? ahead : 16)) > lane;
    st[j] =
        j < n ? attn_select(hidden, ATTN_SPLAT(-INFINITY), st[j] * scale) : ATTN_SPLAT(-INFINITY);
  }
  for (int64_t j = 0; how && j < n; j++)
    for (int r = 0; r < rows; r++)
      st[j][r] += attn_mask_at(mask, how, off[3] + (i0 + r) * mr + (j0 + j) * mc);
}

/* The block's rows transposed: xt[e][r] = x[i0 + r][e] for e < len, lanes
 * past `rows` repeating the last row. */
ATTN_INLINE void attn_transpose_rows(attn_vf *xt, const float *x, int64_t stride, int64_t len,
                                     int64_t rows) {
  for (int64_t e = 0; e < len; e++)
    for (int r = 0; r < 16; r++) xt[e][r] = x[(r < rows ? r : rows - 1) * stride + e];
}

/* ATTN_QROWS (16) query rows [i0, i0 + rows) at once, one row per vector
 * lane (q transposed once for the block): a key's scores are one vector, so
 * are the softmax's running max and sum and each output dim's accumulator,
 * and no key tile is transposed. Output dims go 8 at a time. */
ATTN_INLINE void attn_rows(float *out, const float *q, const float *k, const float *v,
                           const void *mask, const int64_t *num, float scale,
                           const int64_t off[ATTN_OPERANDS], int64_t i0, int64_t rows) {
  enum { U = 8 };
  int64_t tk = num[ATTN_TK], d = num[ATTN_D], dv = num[ATTN_DV];
  int64_t qr = num[ATTN_ROW], vr = num[ATTN_ROW + 2];
  attn_vf qt[ATTN_MAX_HEAD], acc[ATTN_MAX_HEAD], st[ATTN_KTILE];
  attn_vf max = ATTN_SPLAT(-INFINITY), sum = ATTN_SPLAT(0);
  attn_transpose_rows(qt, q + off[0] + i0 * qr, qr, d, rows);
  for (int64_t e = 0; e < dv; e++) acc[e] = ATTN_SPLAT(0);
  int64_t keys = num[ATTN_CAUSAL] && i0 + rows < tk ? i0 + rows : tk;
  for (int64_t j0 = 0; j0 < keys; j0 += ATTN_KTILE) {
    int64_t n = keys - j0 < ATTN_KTILE ? keys - j0 : ATTN_KTILE;
    attn_block_scores(st, qt, k, mask, num, scale, off, i0, rows, j0, n);
    attn_vf grown = max;
    for (int j = 0; j < ATTN_KTILE; j++) grown = attn_max(st[j], grown);
    /* the terms are e^(score - max); a row that has seen nothing yet (max
       -inf) has only zero terms so far, and shifts by 0 instead */
    attn_vf shift = attn_select(grown == ATTN_SPLAT(-INFINITY), ATTN_SPLAT(0), grown);
    /* the earlier terms' rescaling e^(old max - new), 0 when there were none */
    attn_vf rescale = attn_exp(max - shift);
    sum *= rescale;
    max = grown;
    for (int j = 0; j < ATTN_KTILE; j++) {
      st[j] = attn_exp(st[j] - shift);
      sum += st[j];
    }
    int64_t e = 0;
    for (; e + U <= dv; e += U) { /* acc[e] = acc[e] * rescale + sum_j p[j] v[j][e] */
      attn_vf a[U];
      ATTN_UNROLL
      for (int u = 0; u < U; u++) a[u] = acc[e + u] * rescale;
      for (int64_t j = 0; j < n; j++) {
        const float *vj = v + off[2] + (j0 + j) * vr + e;
        attn_vf p = st[j];
        ATTN_UNROLL
        for (int u = 0; u < U; u++) a[u] += vj[u] * p;
      }
      ATTN_UNROLL
      for (int u = 0; u < U; u++) acc[e + u] = a[u];
    }
    for (; e < dv; e++) {
      attn_vf a = acc[e] * rescale;
      for (int64_t j = 0; j < n; j++) a += v[off[2] + (j0 + j) * vr + e] * st[j];
      acc[e] = a;
    }
  }
  attn_vf inv = 1.0f / sum;
  for (int64_t r = 0; r < rows; r++) {
    float *dst = out + (i0 + r) * dv;
    for (int64_t e = 0; e < dv; e++) dst[e] = acc[e][r] * inv[r];
  }
}

/* y_u[e] += sum_(r < rows) w[u][r] x[r * stride + e] for e < len and u < n
 * (at most 4): n consecutive rows of a key tile's gradient (y_u at y + u *
 * pitch) from the block's rows x, each row of x loaded once for the 4. */
ATTN_INLINE void attn_add_rows(float *y, const attn_vf *w, int64_t n, int64_t pitch, const float *x,
                               int64_t stride, int64_t len, int64_t rows) {
  enum { K = 4 };
  float ws[K][16];
  for (int u = 0; u < K; u++) attn_store(ws[u], u < n ? w[u] : ATTN_SPLAT(0));
  float *yu[K];
  for (int u = 0; u < K; u++) yu[u] = y + (u < n ? u : 0) * pitch; /* rows past n: add 0 */
  int64_t e = 0;
  for (; e + 16 <= len; e += 16) {
    attn_vf a[K];
    ATTN_UNROLL
    for (int u = 0; u < K; u++) a[u] = ATTN_SPLAT(0);
    for (int64_t r = 0; r < rows; r++) {
      attn_vf xr = attn_load(x + r * stride + e);
      ATTN_UNROLL
      for (int u = 0; u < K; u++) a[u] += ws[u][r] * xr;
    }
    ATTN_UNROLL
    for (int u = 0; u < K; u++) attn_store(yu[u] + e, attn_load(yu[u] + e) + a[u]);
  }
  for (; e < len; e++)
    for (int u = 0; u < n; u++) {
      float a = 0;
      for (int64_t r = 0; r < rows; r++) a += ws[u][r] * x[r * stride + e];
      yu[u][e] += a;
    }
}

/* The gradients of one batch index's attention, dq [Tq, D], dk [Tk, D] and
 * dv [Tk, Dv] at `out`, each in a [T, W] part of rows of W floats (T and W the
 * larger of the queries' and keys' counts and of D and Dv; the part's rest
 * zeros), the three one after the other, from the forward's output o and
 * its gradient g (FlashAttention-2's backward, one thread a batch index so
 * that dk and dv need no atomics). Per block of 16 query rows, one per lane:
 * the rows' log-sum-exp first (the forward's running max and sum again),
 * then per tile of keys p = e^(s - lse), dp = g v^T, ds = p (dp - rowsum(g o)),
 * dq += ds k, dk += ds^T q (both times the scale) and dv += p^T g. No score
 * is stored beyond a tile. */
ATTN_INLINE void attn_grad_head(float *out, const float *q, const float *k, const float *v,
                                const void *mask, const float *o, const float *g,
                                const int64_t *num, float scale, const int64_t off[ATTN_OPERANDS]) {
  enum { U = 8 };
  int64_t tq = num[ATTN_TQ], tk = num[ATTN_TK], d = num[ATTN_D], dv = num[ATTN_DV];
  int64_t qr = num[ATTN_ROW], kr = num[ATTN_ROW + 1], vr = num[ATTN_ROW + 2];
  int64_t orow = num[ATTN_ROW + 4], gr = num[ATTN_ROW + 5];
  int64_t t = tq > tk ? tq : tk, w = d > dv ? d : dv;
  float *dq = out, *dk = out + t * w, *dval = dk + t * w;
  memset(out, 0, sizeof *out * (size_t)(3 * t * w));
  /* the block's scores against every key, from the first pass to the second
   * (a sixth of the multiply-adds); where the heap has no room, recomputed */
  size_t strip_bytes = sizeof(attn_vf) * (size_t)((tk + ATTN_KTILE - 1) / ATTN_KTILE * ATTN_KTILE);
  attn_vf *strip = aligned_alloc(sizeof(attn_vf), strip_bytes);
  attn_vf qt[ATTN_MAX_HEAD], gt[ATTN_MAX_HEAD], dqt[ATTN_MAX_HEAD], p[ATTN_KTILE], ds[ATTN_KTILE];
  for (int64_t i0 = 0; i0 < tq; i0 += ATTN_QROWS) {
    int64_t rows = tq - i0 < ATTN_QROWS ? tq - i0 : ATTN_QROWS;
    const float *qi = q + off[0] + i0 * qr, *gi = g + off[5] + i0 * gr;
    const float *oi = o + off[4] + i0 * orow;
    attn_transpose_rows(qt, qi, qr, d, rows);
    attn_transpose_rows(gt, gi, gr, dv, rows);
    attn_vf delta = ATTN_SPLAT(0); /* rowsum(g o), summed in double */
    for (int64_t r = 0; r < rows; r++) {
      double t = 0;
      for (int64_t e = 0; e < dv; e++) t += (double)gi[r * gr + e] * oi[r * orow + e];
      delta[r] = (float)t;
    }
    int64_t keys = num[ATTN_CAUSAL] && i0 + rows < tk ? i0 + rows : tk;
    attn_vf max = ATTN_SPLAT(-INFINITY), sum = ATTN_SPLAT(0);
    for (int64_t j0 = 0; j0 < keys; j0 += ATTN_KTILE) {
      int64_t n = keys - j0 < ATTN_KTILE ? keys - j0 : ATTN_KTILE;
      attn_vf *s = strip ? strip + j0 : p; /* kept for the second pass where there is room */
      attn_block_scores(s, qt, k, mask, num, scale, off, i0, rows, j0, n);
      attn_vf grown = max;
      for (int64_t j = 0; j < n; j++) grown = attn_max(s[j], grown);
      attn_vf shift = attn_select(grown == ATTN_SPLAT(-INFINITY), ATTN_SPLAT(0), grown);
      sum *= attn_exp(max - shift);
      max = grown;
      for (int64_t j = 0; j < n; j++) sum += attn_exp(s[j] - shift);
    }
    /* a row hiding every key: -inf, and its probabilities NaN, as softmax's */
    attn_vf lse = attn_select(max == ATTN_SPLAT(-INFINITY), ATTN_SPLAT(0), max);
    for (int r = 0; r < 16; r++) lse[r] += logf(sum[r]);
    for (int64_t e = 0; e < d; e++) dqt[e] = ATTN_SPLAT(0);
    for (int64_t j0 = 0; j0 < keys; j0 += ATTN_KTILE) {
      int64_t n = keys - j0 < ATTN_KTILE ? keys - j0 : ATTN_KTILE;
      const attn_vf *s = strip ? strip + j0 : p;
      if (!strip) attn_block_scores(p, qt, k, mask, num, scale, off, i0, rows, j0, n);
      for (int64_t j = 0; j < n; j++) p[j] = attn_exp(s[j] - lse);
      attn_dots(ds, gt, v + off[2] + j0 * vr, vr, dv, n); /* dp */
      for (int64_t j = 0; j < n; j++) ds[j] = p[j] * (ds[j] - delta);
      const float *kt = k + off[1] + j0 * kr;
      int64_t e = 0;
      for (; e + U <= d; e += U) { /* dqt[e] += sum_j k[j][e] ds[j] */
        attn_vf a[U];
        ATTN_UNROLL
        for (int u = 0; u < U; u++) a[u] = dqt[e + u];
        for (int64_t j = 0; j < n; j++) {
          const float *kj = kt + j * kr + e;
          attn_vf w = ds[j];
          ATTN_UNROLL
          for (int u = 0; u < U; u++) a[u] += kj[u] * w;
        }
        ATTN_UNROLL
        for (int u = 0; u < U; u++) dqt[e + u] = a[u];
      }
      for (; e < d; e++)
        for (int64_t j = 0; j < n; j++) dqt[e] += kt[j * kr + e] * ds[j];
      for (int64_t j = 0; j < n; j++) ds[j] *= scale;
      for (int64_t j = 0; j < n; j += 4) {
        int64_t m = n - j < 4 ? n - j : 4;
        attn_add_rows(dval + (j0 + j) * w, &p[j], m, w, gi, gr, dv, rows);
        attn_add_rows(dk + (j0 + j) * w, &ds[j], m, w, qi, qr, d, rows);
      }
    }
    for (int64_t r = 0; r < rows; r++)
      for (int64_t e = 0; e < d; e++) dq[(i0 + r) * w + e] = dqt[e][r] * scale;
  }
  free(strip);
}

static inline __attribute__((always_inline)) void attn_items(void *const *args, int64_t begin,
                                                             int64_t end) {
  const int64_t *num = args[4];
  float scale = (float)*(const double *)args[5];
  int64_t tq = num[ATTN_TQ], blocks = (tq + ATTN_QROWS - 1) / ATTN_QROWS;
  for (int64_t item = begin; item < end; item++) {
    int64_t b = item / blocks, i0 = item % blocks * ATTN_QROWS;
    int64_t rows = tq - i0 < ATTN_QROWS ? tq - i0 : ATTN_QROWS;
    int64_t off[ATTN_OPERANDS];
    attn_offsets(num, b, off);
    float *o = (float *)args[0] + b * tq * num[ATTN_DV];
    if (rows == 1)
      attn_row(o + i0 * num[ATTN_DV], args[1], args[2], args[3], args[6], num, scale, off, i0);
    else
      attn_rows(o, args[1], args[2], args[3], args[6], num, scale, off, i0, rows);
  }
}

static inline __attribute__((always_inline)) void attn_grad_items(void *const *args, int64_t begin,
                                                                  int64_t end) {
  const int64_t *num = args[4];
  float scale = (float)*(const double *)args[5];
  int64_t t = num[ATTN_TQ] > num[ATTN_TK] ? num[ATTN_TQ] : num[ATTN_TK];
  int64_t per = 3 * t * (num[ATTN_D] > num[ATTN_DV] ? num[ATTN_D] : num[ATTN_DV]);
  for (int64_t b = begin; b < end; b++) {
    int64_t off[ATTN_OPERANDS];
    attn_offsets(num, b, off);
    attn_grad_head((float *)args[0] + b * per, args[1], args[2], args[3], args[6], args[7], args[8],
                   num, scale, off);
  }
}

/* Each entry point in an AVX-512 and an AVX2+FMA build, chosen at run time. */
#if defined(__x86_64__) && defined(__GNUC__)
#define ATTN_DISPATCH(name, body)                                                                  \
  __attribute__((target("avx512f,avx512dq,avx2,fma"))) static void name##_avx512(                  \
      void *const *args, int64_t begin, int64_t end) {                                             \
    body(args, begin, end);                                                                        \
  }                                                                                                \
  __attribute__((target("avx2,fma"))) static void name##_avx2(void *const *args, int64_t begin,    \
                                                              int64_t end) {                       \
    body(args, begin, end);                                                                        \
  }                                                                                                \
  void name(void *const *args, int64_t begin, int64_t end) {                                       \
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"))                   \
      name##_avx512(args, begin, end);                                                             \
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))                      \
      name##_avx2(args, begin, end);                                                               \
    else                                                                                           \
      body(args, begin, end);                                                                      \
  }
#else
#define ATTN_DISPATCH(name, body)                                                                  \
  void name(void *const *args, int64_t begin, int64_t end) { body(args, begin, end); }
#endif

/* The numbers the kernels read, from the step's description: offset,
 * row_stride and bstride for q, k, v, the mask and (backward) the forward's
 * output and its gradient; bstride[s * pitch + x] is operand s's stride
 * along batch dim x. Returns how many (at most 64), or 0 for more batch dims
 * or wider heads than it takes. */
int lm_attention_f32_numbers(int nbatch, const int64_t *batch, int64_t tq, int64_t tk, int64_t d,
                             int64_t dv, int causal, int mask, int64_t mask_stride, int backward,
                             const int64_t *offset, const int64_t *row_stride,
                             const int64_t *bstride, int pitch, int64_t *num) {
  if (nbatch < 0 || nbatch > ATTN_MAX_BATCH || d > ATTN_MAX_HEAD || dv > ATTN_MAX_HEAD) return 0;
  memset(num, 0, sizeof *num * ATTN_NUMBERS);
  num[ATTN_NBATCH] = nbatch, num[ATTN_TQ] = tq, num[ATTN_TK] = tk;
  num[ATTN_D] = d, num[ATTN_DV] = dv, num[ATTN_CAUSAL] = causal != 0;
  num[ATTN_MASK] = mask, num[ATTN_MASK_COL] = mask_stride;
  for (int s = 0; s < ATTN_OPERANDS; s++) {
    if ((s == 3 && !mask) || (s > 3 && !backward)) continue;
    num[ATTN_OFFSET + s] = offset[s];
    num[ATTN_ROW + s] = row_stride[s];
    for (int x = 0; x < nbatch; x++)
      num[ATTN_BSTRIDE + s * ATTN_MAX_BATCH + x] = bstride[s * pitch + x];
  }
  for (int x = 0; x < nbatch; x++) num[ATTN_BATCH + x] = batch[x];
  return ATTN_NUMBERS;
}

/* Work items: every batch index's blocks of query rows. */
int64_t lm_attention_f32_items(const int64_t *num) {
  int64_t items = (num[ATTN_TQ] + ATTN_QROWS - 1) / ATTN_QROWS;
  for (int64_t x = 0; x < num[ATTN_NBATCH]; x++) items *= num[ATTN_BATCH + x];
  return items;
}

/* The backward's work items: every batch index. */
int64_t lm_attention_grad_f32_items(const int64_t *num) {
  int64_t items = 1;
  for (int64_t x = 0; x < num[ATTN_NBATCH]; x++) items *= num[ATTN_BATCH + x];
  return items;
}

ATTN_DISPATCH(lm_attention_f32, attn_items)
ATTN_DISPATCH(lm_attention_grad_f32, attn_grad_items)
