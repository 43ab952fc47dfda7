/* runtime/rng.c — counter-based random numbers for the random ops.
 *
 * What: Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers:
 * as easy as 1, 2, 3", SC'11 — the generator of Random123, cuRAND and JAX),
 * keyed per op, counted per element, plus the maps to uniform, normal and
 * truncated-normal values.
 *
 * Why counter-based: element i of an op's output depends only on (key, i),
 * so kernels may split elements across any number of OpenMP threads (or CUDA
 * threads) and every machine and thread count gives bitwise-identical values.
 *
 * How: the pure functions (Philox, the maps to uniform/normal/truncated
 * normal, the inverse CDF) are inline in runtime/rng_core.h, so the CUDA
 * kernels call the same code on the device; this file wraps them for C
 * callers and derives the stream key (a string hash: host only).
 *
 * Exact derivation (all integer arithmetic modulo 2^64 or 2^32; a Python
 * implementation with ints masked to 64/32 bits and the `math` module
 * reproduces it):
 *
 *   mix64(z):   z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
 *               z = (z ^ (z >> 27)) * 0x94D049BB133111EB
 *               return z ^ (z >> 31)                       (splitmix64's finalizer)
 *   fnv1a64(s): h = 0xCBF29CE484222325; for each byte c of s (UTF-8, no NUL):
 *               h = (h ^ c) * 0x100000001B3
 *
 *   op_id = seed_attr (as uint64, two's complement)  if seed_attr != 0
 *         = fnv1a64(name of the op's output var)     otherwise
 *   key   = mix64(mix64(program_seed + 0x9E3779B97F4A7C15) ^ op_id)
 *   Philox key words:     k0 = key & 0xFFFFFFFF,  k1 = key >> 32
 *   Philox counter of element i (row-major index into the output):
 *                         c = (i & 0xFFFFFFFF, i >> 32, 0, 0)
 *   (w0, w1, w2, w3) = philox4x32_10(c, (k0, k1)):
 *       10 rounds of
 *         (hi0, lo0) = 0xD2511F53 * c0   (64-bit product split in halves)
 *         (hi1, lo1) = 0xCD9E8D57 * c2
 *         c = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)
 *         and between rounds (not after the 10th):
 *         k0 += 0x9E3779B9, k1 += 0xBB67AE85
 *       (Random123 known answer: ctr 0, key 0 -> 6627e8d5 e169c58d bc57ac4c 9b00dbd8.)
 *
 *   a = ((w1 << 32) | w0) >> 11,  b = ((w3 << 32) | w2) >> 11   (53-bit ints)
 *   uniform  u  = a * 2^-53                                       in [0, 1)
 *   normal   z  = sqrt(-2.0 * log((a + 1) * 2^-53)) * cos(6.283185307179586 * (b * 2^-53))
 *            (Box-Muller, cosine branch; one normal per element)
 *   truncated normal (Paddle's truncated_gaussian_random mapping):
 *            lo = 0.022750131948179198 (= 0.5*erfc(sqrt(2)) = Phi(-2))
 *            hi = 0.9772498680518208   (= 0.5*erfc(-sqrt(2)) = Phi(2))
 *            z  = min(2, max(-2, inv_cdf(lo + (hi - lo) * u)))
 *            inv_cdf is Wichura's AS241, the same code (and constants) as
 *            Python's statistics.NormalDist().inv_cdf.
 *   The ops then compute in double: uniform_random min + (max - min) * u,
 *   gaussian_random mean + std * z, truncated_gaussian_random mean + std * z,
 *   and round once to the output dtype (uniform: a value that rounds to
 *   `max` becomes the largest value of the dtype below max, keeping [min, max)).
 *
 * Uniform values and the integer stream are bit-exact everywhere; normals
 * additionally go through libm's log/cos/sqrt (correctly rounded or within
 * one double ulp in glibc), so another libm may differ in the last double
 * bit — after rounding to fp32 that essentially never shows.
 */
#include "runtime/rng.h"
#include "runtime/rng_core.h"

void pe_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    pe_rng_core_philox(ctr, key, out);
}

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static uint64_t fnv1a64(const char *s) {
    uint64_t h = UINT64_C(0xCBF29CE484222325);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++)
        h = (h ^ *p) * UINT64_C(0x100000001B3);
    return h;
}

uint64_t pe_rng_key(uint64_t program_seed, int64_t op_seed, const char *var_name) {
    uint64_t op_id = op_seed != 0 ? (uint64_t)op_seed : fnv1a64(var_name);
    return mix64(mix64(program_seed + UINT64_C(0x9E3779B97F4A7C15)) ^ op_id);
}

void pe_rng_block(uint64_t key, uint64_t index, uint32_t out[4]) { pe_rng_core_block(key, index, out); }

double pe_rng_uniform(uint64_t key, uint64_t index) {
    uint32_t w[4];
    pe_rng_core_block(key, index, w);
    return pe_rng_core_uniform(w);
}

double pe_rng_normal(uint64_t key, uint64_t index) {
    uint32_t w[4];
    pe_rng_core_block(key, index, w);
    return pe_rng_core_normal(w);
}

double pe_rng_truncated_normal(uint64_t key, uint64_t index) {
    uint32_t w[4];
    pe_rng_core_block(key, index, w);
    return pe_rng_core_truncated_normal(w);
}

/* Wichura, M.J. (1988), "Algorithm AS241: The Percentage Points of the Normal
 * Distribution", Applied Statistics 37(3): 477-484. Relative accuracy ~1e-16.
 * Evaluation order as in Python's statistics module, so results match it. */
double pe_normal_inv_cdf(double p) { return pe_rng_core_inv_cdf(p); }
