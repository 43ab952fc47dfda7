/* runtime/rng.h — counter-based random numbers (Philox4x32-10), internal.
 *
 *     uint64_t key = pe_rng_key(ctx->program_seed, seed_attr, out_var_name);
 *     for (int64_t i = 0; i < n; i++) out[i] = (float)pe_rng_normal(key, (uint64_t)i);
 *
 * Every value is a pure function of (key, element index), so a kernel may
 * split its elements across any number of threads and still produce the
 * same bits on every machine. The exact derivation (reproducible in Python)
 * is written at the top of runtime/rng.c.
 */
#ifndef PE_RUNTIME_RNG_H
#define PE_RUNTIME_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Philox4x32 with 10 rounds (Salmon et al., SC'11; Random123's philox4x32_10):
 * out = Philox(ctr, key). */
void pe_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* 64-bit stream key of a random op: from the program seed and the op's own
 * seed attr when it is non-zero, otherwise a hash of the output var name. */
uint64_t pe_rng_key(uint64_t program_seed, int64_t op_seed, const char *var_name);

/* The four 32-bit words of element `index` of stream `key`. */
void pe_rng_block(uint64_t key, uint64_t index, uint32_t out[4]);

/* Element `index` of stream `key` as: a uniform double in [0, 1) (53 bits);
 * a standard normal (Box-Muller); a standard normal truncated to [-2, 2]
 * (inverse-CDF mapping, as Paddle's truncated_gaussian_random). */
double pe_rng_uniform(uint64_t key, uint64_t index);
double pe_rng_normal(uint64_t key, uint64_t index);
double pe_rng_truncated_normal(uint64_t key, uint64_t index);

/* Inverse of the standard normal CDF (Wichura's AS241, as Python's
 * statistics.NormalDist.inv_cdf). p in (0, 1). */
double pe_normal_inv_cdf(double p);

#ifdef __cplusplus
}
#endif
#endif
