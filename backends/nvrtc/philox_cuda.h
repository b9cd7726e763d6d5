/*
 * Philox 4x32-10 of the generated CUDA C, written once as a macro so that the
 * very same text is
 *   - stringified into the prelude NVRTC compiles (cuda_prelude.c), and
 *   - compiled as C on the host by tests/test_nvrtc.c, which checks it bit for
 *     bit against the reference in base/philox.h (no GPU needed).
 * DEV is the functions' qualifiers ("static __device__ __forceinline__" for
 * CUDA). The code is the common subset of C and C++. lm_mulhi (the high 32
 * bits of a 32x32-bit product) is defined outside: __umulhi on the device,
 * one 64-bit product on the host.
 *
 * LK_RAND (ir/kernel.h): counter block (lo32(c), hi32(c), stream, 0), key
 * (k0, k1); F32: (x0 >> 8) * 2^-24; F64: ((x0 >> 5) * 2^26 + (x1 >> 6)) * 2^-53.
 */
#ifndef LOOM_BACKENDS_NVRTC_PHILOX_CUDA_H
#define LOOM_BACKENDS_NVRTC_PHILOX_CUDA_H

#include "base/philox.h"

#define LM_CUDA_PHILOX_CODE(DEV)                                                                   \
  DEV void lm_philox_block(unsigned int c0, unsigned int c1, unsigned int c2, unsigned int c3,     \
                           unsigned int k0, unsigned int k1, unsigned int out[4]) {                \
    for (int lm_i = 0; lm_i < 10; lm_i++) {                                                        \
      unsigned int hi0 = lm_mulhi(LM_PHILOX_M0, c0), lo0 = LM_PHILOX_M0 * c0;                      \
      unsigned int hi1 = lm_mulhi(LM_PHILOX_M1, c2), lo1 = LM_PHILOX_M1 * c2;                      \
      c0 = hi1 ^ c1 ^ k0;                                                                          \
      c1 = lo1;                                                                                    \
      c2 = hi0 ^ c3 ^ k1;                                                                          \
      c3 = lo0;                                                                                    \
      k0 += LM_PHILOX_W0;                                                                          \
      k1 += LM_PHILOX_W1;                                                                          \
    }                                                                                              \
    out[0] = c0;                                                                                   \
    out[1] = c1;                                                                                   \
    out[2] = c2;                                                                                   \
    out[3] = c3;                                                                                   \
  }                                                                                                \
  DEV float lm_philox_f32(unsigned int k0, unsigned int k1, unsigned long long counter,            \
                          unsigned int stream) {                                                   \
    unsigned int x[4];                                                                             \
    lm_philox_block((unsigned int)counter, (unsigned int)(counter >> 32), stream, 0u, k0, k1, x);  \
    return (float)(x[0] >> 8) * (1.0f / 16777216.0f);                                              \
  }                                                                                                \
  DEV double lm_philox_f64(unsigned int k0, unsigned int k1, unsigned long long counter,           \
                           unsigned int stream) {                                                  \
    unsigned int x[4];                                                                             \
    lm_philox_block((unsigned int)counter, (unsigned int)(counter >> 32), stream, 0u, k0, k1, x);  \
    return ((double)(x[0] >> 5) * 67108864.0 + (double)(x[1] >> 6)) * (1.0 / 9007199254740992.0);  \
  }

/* The text of a macro's expansion (its arguments expanded first). */
#define LM_CUDA_STR_(...) #__VA_ARGS__
#define LM_CUDA_STR(...) LM_CUDA_STR_(__VA_ARGS__)

#endif
