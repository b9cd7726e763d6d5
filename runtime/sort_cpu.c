/*
 * Sorting rows on the CPU (LM_SORT): for each row of a stored [rows, n]
 * source, the positions of its first k values in order, as int64.
 *
 * Every value becomes an unsigned key that orders as the values do (NaN above
 * every number, -0 equal to 0; descending: the key's complement), and a row
 * is ordered by (key, position). That is a total order, so each way below
 * gives the same answer, the stable one (equal values keep their order), and
 * CUDA's kernel (backends/nvrtc/cuda_sort.c) gives it too:
 *
 *  - a short row (n <= SHORT_ROW): insertion sort on the stack;
 *  - a few of many (k <= n / FEW): a heap of the k first seen so far, kept in
 *    the output itself, then sorted in place: n key reads and, for values in
 *    no particular order, about k log(n / k) log k more;
 *  - otherwise LSD radix sort of (key, position) pairs, RADIX_BITS a pass,
 *    skipping a pass whose digit every key shares (three passes for 32-bit
 *    and narrower values), in scratch memory of 32 n bytes and the
 *    histograms; where malloc finds no room, the heap with k entries
 *    (O(n log k)), which needs none.
 *
 * A work item is a row; a call takes its scratch once for its rows.
 *
 * The file includes no loom header: exported libraries compile its text
 * (io/export_source.c), as runtime/attention_cpu.c's.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The numbers a sort reads (lm_sort_numbers writes them). */
enum { SORT_N, SORT_K, SORT_DTYPE, SORT_DESCENDING, SORT_ROWS, SORT_NUMBERS };
/* loom_dtype's values (runtime/sort_step.c checks that they are). */
enum {
  SORT_F32,
  SORT_F64,
  SORT_I32,
  SORT_I64,
  SORT_U8,
  SORT_BOOL,
  SORT_BF16,
  SORT_F16,
  SORT_I8,
  SORT_I16,
  SORT_U16,
  SORT_U32,
  SORT_U64
};

#define SHORT_ROW 32
#define FEW 64
#define RADIX_BITS 11
#define RADIX_BUCKETS (1 << RADIX_BITS)
#define RADIX_PASSES ((64 + RADIX_BITS - 1) / RADIX_BITS)

/* IEEE bits of `width` bits (sign first) as a key: NaN above +inf, -0 as 0. */
static inline uint64_t float_key(uint64_t bits, int width, uint64_t exp_mask, uint64_t man_mask) {
  uint64_t sign = (uint64_t)1 << (width - 1), all = sign | (sign - 1);
  if ((bits & exp_mask) == exp_mask && (bits & man_mask)) bits = exp_mask | ((man_mask >> 1) + 1);
  if ((bits & ~sign) == 0) bits = 0;
  return bits & sign ? ~bits & all : bits | sign;
}

/* The keys of a row's values [i0, i0 + m): one loop per dtype, which the
 * compiler vectorizes (a switch inside the loop it would not). */
#define KEYS_LOOP(T, expr)                                                                         \
  do {                                                                                             \
    const T *v = (const T *)row + i0;                                                              \
    for (int64_t i = 0; i < m; i++) key[i] = (expr) ^ flip;                                        \
  } while (0)
static void keys_at(uint64_t *key, const void *row, int64_t i0, int64_t m, int dtype,
                    uint64_t flip) {
  switch (dtype) {
  case SORT_F32: KEYS_LOOP(uint32_t, float_key(v[i], 32, 0x7f800000u, 0x7fffffu)); break;
  case SORT_F64:
    KEYS_LOOP(uint64_t, float_key(v[i], 64, 0x7ff0000000000000ull, 0xfffffffffffffull));
    break;
  case SORT_BF16: KEYS_LOOP(uint16_t, float_key(v[i], 16, 0x7f80u, 0x7fu)); break;
  case SORT_F16: KEYS_LOOP(uint16_t, float_key(v[i], 16, 0x7c00u, 0x3ffu)); break;
  case SORT_I32: KEYS_LOOP(int32_t, (uint32_t)v[i] ^ 0x80000000u); break;
  case SORT_I64: KEYS_LOOP(int64_t, (uint64_t)v[i] ^ ((uint64_t)1 << 63)); break;
  case SORT_I8: KEYS_LOOP(int8_t, (uint8_t)v[i] ^ 0x80u); break;
  case SORT_I16: KEYS_LOOP(int16_t, (uint16_t)v[i] ^ 0x8000u); break;
  case SORT_U16: KEYS_LOOP(uint16_t, (uint64_t)v[i]); break;
  case SORT_U32: KEYS_LOOP(uint32_t, (uint64_t)v[i]); break;
  case SORT_U64: KEYS_LOOP(uint64_t, v[i]); break;
  default: KEYS_LOOP(uint8_t, (uint64_t)v[i]); break; /* SORT_U8 */
  }
}
#define KEY_BLOCK 256

/* One value's key, complemented (flip all ones) for descending. */
static inline uint64_t key_at(const void *row, int64_t i, int dtype, uint64_t flip) {
  uint64_t k;
  keys_at(&k, row, i, 1, dtype, flip);
  return k;
}

static inline bool before(uint64_t ka, int64_t ia, uint64_t kb, int64_t ib) {
  return ka < kb || (ka == kb && ia < ib);
}

/* ------------------------------------------------------------ short rows */

static void sort_short(int64_t *out, const void *row, int64_t n, int64_t k, int dtype,
                       uint64_t flip) {
  uint64_t key[SHORT_ROW];
  int64_t at[SHORT_ROW];
  for (int64_t i = 0; i < n; i++) {
    uint64_t ki = key_at(row, i, dtype, flip);
    int64_t j = i;
    for (; j > 0 && ki < key[j - 1]; j--) key[j] = key[j - 1], at[j] = at[j - 1];
    key[j] = ki, at[j] = i;
  }
  memcpy(out, at, sizeof *out * (size_t)k);
}

/* ------------------------------------------------------------ the heap */

/* heap[0..size): each entry after (in (key, position) order) its children. */
static void sift_down(int64_t *heap, int64_t size, int64_t at, const void *row, int dtype,
                      uint64_t flip) {
  int64_t x = heap[at];
  uint64_t kx = key_at(row, x, dtype, flip);
  for (;;) {
    int64_t c = 2 * at + 1;
    if (c >= size) break;
    uint64_t kc = key_at(row, heap[c], dtype, flip);
    if (c + 1 < size) {
      uint64_t kr = key_at(row, heap[c + 1], dtype, flip);
      if (before(kc, heap[c], kr, heap[c + 1])) c++, kc = kr;
    }
    if (!before(kx, x, kc, heap[c])) break;
    heap[at] = heap[c];
    at = c;
  }
  heap[at] = x;
}

/* The k first positions in order, in out[0..k), with no memory but out. */
static void sort_heap(int64_t *out, const void *row, int64_t n, int64_t k, int dtype,
                      uint64_t flip) {
  if (k == 0) return;
  for (int64_t i = 0; i < k; i++) out[i] = i;
  for (int64_t i = k / 2 - 1; i >= 0; i--) sift_down(out, k, i, row, dtype, flip);
  uint64_t top = key_at(row, out[0], dtype, flip), key[KEY_BLOCK];
  for (int64_t i0 = k; i0 < n; i0 += KEY_BLOCK) {
    int64_t m = n - i0 < KEY_BLOCK ? n - i0 : KEY_BLOCK;
    keys_at(key, row, i0, m, dtype, flip);
    for (int64_t j = 0; j < m; j++) {
      /* a later position with an equal key comes after the top: only smaller keys enter */
      if (key[j] >= top) continue;
      out[0] = i0 + j;
      sift_down(out, k, 0, row, dtype, flip);
      top = key_at(row, out[0], dtype, flip);
    }
  }
  for (int64_t end = k - 1; end > 0; end--) {
    int64_t last = out[0];
    out[0] = out[end], out[end] = last;
    sift_down(out, end, 0, row, dtype, flip);
  }
}

/* ------------------------------------------------------------ radix sort */

typedef struct scratch {
  uint64_t *key[2];
  int64_t *at[2];
  int64_t (*count)[RADIX_BUCKETS]; /* [RADIX_PASSES] */
} scratch;

static bool scratch_take(scratch *s, int64_t n) {
  size_t pairs = (size_t)n * (2 * sizeof(uint64_t) + 2 * sizeof(int64_t));
  size_t counts = sizeof(int64_t) * RADIX_PASSES * RADIX_BUCKETS;
  unsigned char *m = malloc(counts + pairs);
  if (!m) return false;
  s->count = (int64_t(*)[RADIX_BUCKETS])m;
  s->key[0] = (uint64_t *)(m + counts), s->key[1] = s->key[0] + n;
  s->at[0] = (int64_t *)(s->key[1] + n), s->at[1] = s->at[0] + n;
  return true;
}

/* passes: those the key's bits need (a descending key's bits above them are
 * all ones, the same digit for every key) */
static void sort_radix(int64_t *out, const void *row, int64_t n, int64_t k, int dtype,
                       uint64_t flip, int passes, scratch *s) {
  memset(s->count, 0, sizeof(int64_t) * (size_t)passes * RADIX_BUCKETS);
  uint64_t *key = s->key[0];
  int64_t *at = s->at[0];
  keys_at(key, row, 0, n, dtype, flip);
  for (int64_t i = 0; i < n; i++) {
    at[i] = i;
    for (int p = 0; p < passes; p++)
      s->count[p][(key[i] >> (p * RADIX_BITS)) & (RADIX_BUCKETS - 1)]++;
  }
  int from = 0;
  for (int p = 0; p < passes; p++) {
    int shift = p * RADIX_BITS;
    int64_t *count = s->count[p];
    if (count[(s->key[from][0] >> shift) & (RADIX_BUCKETS - 1)] == n) continue; /* one digit */
    int64_t start = 0;
    for (int b = 0; b < RADIX_BUCKETS; b++) {
      int64_t c = count[b];
      count[b] = start;
      start += c;
    }
    const uint64_t *kf = s->key[from];
    const int64_t *af = s->at[from];
    uint64_t *kt = s->key[1 - from];
    int64_t *atto = s->at[1 - from];
    for (int64_t i = 0; i < n; i++) {
      int64_t to = count[(kf[i] >> shift) & (RADIX_BUCKETS - 1)]++;
      kt[to] = kf[i], atto[to] = af[i];
    }
    from = 1 - from;
  }
  memcpy(out, s->at[from], sizeof *out * (size_t)k);
}

/* ------------------------------------------------------------ entry points */

int64_t lm_sort_items(const int64_t *num) { return num[SORT_ROWS]; }

/* args: {int64_t *out [rows, k], const void *src [rows, n], const int64_t num[SORT_NUMBERS]};
 * [begin, end): rows. */
void lm_sort_rows(void *const *args, int64_t begin, int64_t end) {
  int64_t *out = args[0];
  const unsigned char *src = args[1];
  const int64_t *num = args[2];
  int64_t n = num[SORT_N], k = num[SORT_K];
  int dtype = (int)num[SORT_DTYPE];
  uint64_t flip = num[SORT_DESCENDING] ? ~(uint64_t)0 : 0;
  size_t width = dtype == SORT_F64 || dtype == SORT_I64 || dtype == SORT_U64   ? 8
                 : dtype == SORT_F32 || dtype == SORT_I32 || dtype == SORT_U32 ? 4
                 : dtype == SORT_U8 || dtype == SORT_I8                        ? 1
                                                                               : 2;
  int passes = (int)(8 * width + RADIX_BITS - 1) / RADIX_BITS;
  bool radix = k > 0 && n > SHORT_ROW && k > n / FEW;
  scratch s = {{NULL, NULL}, {NULL, NULL}, NULL};
  if (radix && !scratch_take(&s, n)) radix = false; /* the heap needs no memory */
  /* (loom refuses k > n; an exported library run at such sizes gets -1 past the row) */
  int64_t kept = k < n ? k : n;
  for (int64_t r = begin; r < end; r++) {
    const void *row = src + (size_t)r * (size_t)n * width;
    int64_t *o = out + r * k;
    for (int64_t j = kept; j < k; j++) o[j] = -1;
    if (kept == 0) continue;
    if (n <= SHORT_ROW)
      sort_short(o, row, n, kept, dtype, flip);
    else if (radix)
      sort_radix(o, row, n, kept, dtype, flip, passes, &s);
    else
      sort_heap(o, row, n, kept, dtype, flip);
  }
  if (radix) free(s.count);
}
