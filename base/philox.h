/*
 * Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"),
 * the reference every backend's generated code must match bit for bit.
 */
#ifndef LOOM_BASE_PHILOX_H
#define LOOM_BASE_PHILOX_H

#include <stdint.h>

#define LM_PHILOX_M0 0xD2511F53u
#define LM_PHILOX_M1 0xCD9E8D57u
#define LM_PHILOX_W0 0x9E3779B9u
#define LM_PHILOX_W1 0xBB67AE85u

static inline void lm_philox4x32(const uint32_t ctr_in[4], const uint32_t key_in[2],
                                 uint32_t out[4]) {
  uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
  uint32_t k0 = key_in[0], k1 = key_in[1];
  for (int round = 0; round < 10; round++) {
    uint64_t p0 = (uint64_t)LM_PHILOX_M0 * c0;
    uint64_t p1 = (uint64_t)LM_PHILOX_M1 * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    uint32_t n1 = (uint32_t)p1;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    uint32_t n3 = (uint32_t)p0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += LM_PHILOX_W0;
    k1 += LM_PHILOX_W1;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* The counter block of element `counter` in stream `stream` (see ir/kernel.h, LK_RAND). */
static inline void lm_philox_draw(const uint32_t key[2], uint64_t counter, uint32_t stream,
                                  uint32_t out[4]) {
  uint32_t ctr[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), stream, 0};
  lm_philox4x32(ctr, key, out);
}

static inline float lm_philox_uniform_f32(const uint32_t key[2], uint64_t counter,
                                          uint32_t stream) {
  uint32_t x[4];
  lm_philox_draw(key, counter, stream, x);
  return (float)(x[0] >> 8) * (1.0f / 16777216.0f);
}

static inline double lm_philox_uniform_f64(const uint32_t key[2], uint64_t counter,
                                           uint32_t stream) {
  uint32_t x[4];
  lm_philox_draw(key, counter, stream, x);
  return ((double)(x[0] >> 5) * 67108864.0 + (double)(x[1] >> 6)) * (1.0 / 9007199254740992.0);
}

#endif
