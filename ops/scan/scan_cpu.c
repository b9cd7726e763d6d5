/*
 * Running sums on the CPU (LM_SCAN): a stored source read as [outer, n,
 * inner] around the scanned dim, each of its outer * inner chains (the n
 * values at one (o, c), inner apart) replaced by its running sums from the
 * chain's start (reversed: from its end). F32 sums in double and rounds each
 * sum once, as torch's CPU does; F64 sums in double; I64 in uint64, so that
 * an overflow wraps as two's complement. A sum takes only the values before
 * it in the scan's order, so NaN and inf reach only the sums after them.
 *
 * One value after another, a chain is a chain of dependent additions (about
 * 4 cycles a value), so:
 *  - inner > 1: SCAN_LANES neighbouring chains (contiguous in memory) a step,
 *    their sums in an array the compiler vectorizes the loop over;
 *  - inner == 1 (the last dim): a row SCAN_BLOCK values at a time, the
 *    block's own running sums and then each plus the sum before the block,
 *    so that a block waits on the one before for one addition. (Rows
 *    interleaved instead were 10x slower where rows are 16 KiB apart: their
 *    loads and stores share cache sets.)
 * Where there are fewer than SCAN_CHAINS chains of at least 2 SCAN_MIN_PART
 * values, each is cut into up to ceil(SCAN_CHAINS / chains) parts of at
 * least SCAN_MIN_PART values, scanned in two passes: each part's total into
 * the caller's array (lm_scan_sums; fewer than 2 SCAN_CHAINS totals, within
 * ops/scan/scan_step.h's LM_SCAN_MAX_PARTIALS), then each part's running sums from
 * the totals of the parts before it in the scan's order (lm_scan_rows): so
 * a long row has work for every thread.
 *
 * A work item is (o, part) for inner == 1, (o, part, block of SCAN_LANES
 * chains) for inner > 1; both passes take the same items.
 *
 * The file includes no loom header: exported libraries compile its text
 * (io/export_source.c), as runtime/sort_cpu.c's.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* The numbers a scan reads (lm_scan_numbers writes them). */
enum { SCAN_N, SCAN_INNER, SCAN_OUTER, SCAN_DTYPE, SCAN_REVERSE, SCAN_NUMBERS };
/* loom_dtype's values (ops/scan/scan_step.c checks that they are). */
enum { SCAN_F32 = 0, SCAN_F64 = 1, SCAN_I64 = 3 };

#define SCAN_CHAINS 64
#define SCAN_MIN_PART 2048
#define SCAN_LANES 64
#define SCAN_BLOCK 8

int64_t lm_scan_parts(const int64_t *num) {
  int64_t n = num[SCAN_N], chains = num[SCAN_OUTER] * num[SCAN_INNER];
  if (chains <= 0 || chains >= SCAN_CHAINS || n < 2 * SCAN_MIN_PART) return 1;
  int64_t want = (SCAN_CHAINS + chains - 1) / chains, most = n / SCAN_MIN_PART;
  return want < most ? want : most;
}

int64_t lm_scan_items(const int64_t *num) {
  int64_t inner = num[SCAN_INNER], units = num[SCAN_OUTER] * lm_scan_parts(num);
  return inner > 1 ? units * ((inner + SCAN_LANES - 1) / SCAN_LANES) : units;
}

/* Where a unit's part lies: scan positions [s0, s1) of its chain, whose
 * first is at memory index `first` along the chain, the next `dir` away. */
typedef struct scan_part {
  int64_t first, len, dir;
} scan_part;

static scan_part scan_part_of(const int64_t *num, int64_t parts, int64_t p) {
  int64_t n = num[SCAN_N], s0 = n * p / parts, s1 = n * (p + 1) / parts;
  bool reverse = num[SCAN_REVERSE] != 0;
  return (scan_part){reverse ? n - 1 - s0 : s0, s1 - s0, reverse ? -1 : 1};
}

/* A row's blocks of SCAN_BLOCK values, x and out moving by SIGN 1 a value
 * (scan_*_row's loop; i and acc are left after the last whole block). */
#define SCAN_BLOCKS(ACC, OUT, SIGN)                                                                \
  for (; i + SCAN_BLOCK <= len; i += SCAN_BLOCK, x SIGN## = SCAN_BLOCK, out SIGN## = SCAN_BLOCK) { \
    ACC s[SCAN_BLOCK];                                                                             \
    s[0] = (ACC)x[0];                                                                              \
    for (int k = 1; k < SCAN_BLOCK; k++) s[k] = s[k - 1] + (ACC)x[SIGN k];                         \
    for (int k = 0; k < SCAN_BLOCK; k++) out[SIGN k] = (OUT)(acc + s[k]);                          \
    acc += s[SCAN_BLOCK - 1];                                                                      \
  }

/* The sums of one type: IN read, ACC summed, OUT written; the parts' totals
 * are kept as ACC's 64 bits. */
#define SCAN_TYPE(T, IN, ACC, OUT)                                                                 \
  static inline uint64_t scan_##T##_bits(ACC v) {                                                  \
    uint64_t b;                                                                                    \
    memcpy(&b, &v, 8);                                                                             \
    return b;                                                                                      \
  }                                                                                                \
  static inline ACC scan_##T##_value(uint64_t b) {                                                 \
    ACC v;                                                                                         \
    memcpy(&v, &b, 8);                                                                             \
    return v;                                                                                      \
  }                                                                                                \
                                                                                                   \
  /* The total of the values x[0..len) (in any order: a part's total). */                          \
  static ACC scan_##T##_total(const IN *x, int64_t len) {                                          \
    ACC t[SCAN_BLOCK] = {0}, s = 0;                                                                \
    int64_t i = 0;                                                                                 \
    for (; i + SCAN_BLOCK <= len; i += SCAN_BLOCK)                                                 \
      for (int j = 0; j < SCAN_BLOCK; j++) t[j] += (ACC)x[i + j];                                  \
    for (; i < len; i++) s += (ACC)x[i];                                                           \
    for (int j = 0; j < SCAN_BLOCK; j++) s += t[j];                                                \
    return s;                                                                                      \
  }                                                                                                \
                                                                                                   \
  /* lanes neighbouring chains, len steps of `step` from x and out: running                        \
   * sums from acc[] (left in it), or with out NULL only their totals. */                          \
  static void scan_##T##_columns(OUT *out, const IN *x, int64_t len, int64_t step, int lanes,      \
                                 ACC *acc) {                                                       \
    for (int64_t i = 0; i < len; i++, x += step) {                                                 \
      for (int j = 0; j < lanes; j++) acc[j] += (ACC)x[j];                                         \
      if (out) {                                                                                   \
        for (int j = 0; j < lanes; j++) out[j] = (OUT)acc[j];                                      \
        out += step;                                                                               \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
                                                                                                   \
  /* One row's len values from x on (the next `step` away: 1, or -1 from                           \
   * the end), running sums from acc: SCAN_BLOCK values at a time, each                            \
   * block's own running sums and then each plus the sums before it, so                            \
   * that a block waits on the one before only for one addition to acc. */                         \
  static void scan_##T##_row(OUT *out, const IN *x, int64_t step, int64_t len, ACC acc) {          \
    int64_t i = 0;                                                                                 \
    if (step > 0) {                                                                                \
      SCAN_BLOCKS(ACC, OUT, +)                                                                     \
    } else {                                                                                       \
      SCAN_BLOCKS(ACC, OUT, -)                                                                     \
    }                                                                                              \
    for (; i < len; i++, x += step, out += step) {                                                 \
      acc += (ACC)*x;                                                                              \
      *out = (OUT)acc;                                                                             \
    }                                                                                              \
  }                                                                                                \
                                                                                                   \
  /* The sum of chain's totals before part p (0 where it is the first). */                         \
  static ACC scan_##T##_offset(const uint64_t *partial, int64_t chain, int64_t parts, int64_t p) { \
    ACC s = 0;                                                                                     \
    for (int64_t q = 0; q < p; q++) s += scan_##T##_value(partial[chain * parts + q]);             \
    return s;                                                                                      \
  }                                                                                                \
                                                                                                   \
  /* Items [begin, end) of a scan's pass: totals (out NULL) or sums. */                            \
  static void scan_##T##_items(OUT *out, const IN *x, uint64_t *partial, const int64_t *num,       \
                               int64_t begin, int64_t end) {                                       \
    int64_t n = num[SCAN_N], inner = num[SCAN_INNER], parts = lm_scan_parts(num);                  \
    if (inner > 1) {                                                                               \
      int64_t blocks = (inner + SCAN_LANES - 1) / SCAN_LANES;                                      \
      ACC acc[SCAN_LANES];                                                                         \
      for (int64_t item = begin; item < end; item++) {                                             \
        int64_t b = item % blocks, p = item / blocks % parts, o = item / blocks / parts;           \
        int64_t c0 = b * SCAN_LANES, chain0 = o * inner + c0;                                      \
        int lanes = (int)(inner - c0 < SCAN_LANES ? inner - c0 : SCAN_LANES);                      \
        scan_part pt = scan_part_of(num, parts, p);                                                \
        int64_t at = (o * n + pt.first) * inner + c0;                                              \
        for (int j = 0; j < lanes; j++)                                                            \
          acc[j] = out && parts > 1 ? scan_##T##_offset(partial, chain0 + j, parts, p) : 0;        \
        scan_##T##_columns(out ? out + at : NULL, x + at, pt.len, pt.dir * inner, lanes, acc);     \
        for (int j = 0; j < lanes && !out; j++)                                                    \
          partial[(chain0 + j) * parts + p] = scan_##T##_bits(acc[j]);                             \
      }                                                                                            \
      return;                                                                                      \
    }                                                                                              \
    for (int64_t item = begin; item < end; item++) {                                               \
      int64_t o = item / parts, p = item % parts;                                                  \
      scan_part pt = scan_part_of(num, parts, p);                                                  \
      if (!out) { /* a part's total: its values in memory order */                                 \
        const IN *lo = x + o * n + (pt.dir > 0 ? pt.first : pt.first - pt.len + 1);                \
        partial[o * parts + p] = scan_##T##_bits(scan_##T##_total(lo, pt.len));                    \
        continue;                                                                                  \
      }                                                                                            \
      int64_t at = o * n + pt.first;                                                               \
      scan_##T##_row(out + at, x + at, pt.dir, pt.len,                                             \
                     parts > 1 ? scan_##T##_offset(partial, o, parts, p) : 0);                     \
    }                                                                                              \
  }

SCAN_TYPE(f32, float, double, float)
SCAN_TYPE(f64, double, double, double)
/* (a uint64 beyond int64's range converts to int64 by wrapping, in every
 * compiler loom and its exports build with) */
SCAN_TYPE(i64, int64_t, uint64_t, int64_t)

/* args: {void *out, const void *src, const int64_t numbers[SCAN_NUMBERS],
 * uint64_t partial[chains * parts]}: a pass over items [begin, end). */
static void scan_pass(void *const *args, int64_t begin, int64_t end, bool totals) {
  const int64_t *num = args[2];
  uint64_t *partial = args[3];
  switch (num[SCAN_DTYPE]) {
  case SCAN_F32: scan_f32_items(totals ? NULL : args[0], args[1], partial, num, begin, end); break;
  case SCAN_F64: scan_f64_items(totals ? NULL : args[0], args[1], partial, num, begin, end); break;
  default: scan_i64_items(totals ? NULL : args[0], args[1], partial, num, begin, end); break;
  }
}

void lm_scan_sums(void *const *args, int64_t begin, int64_t end) {
  scan_pass(args, begin, end, true);
}

void lm_scan_rows(void *const *args, int64_t begin, int64_t end) {
  scan_pass(args, begin, end, false);
}
