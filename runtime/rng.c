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

#include <math.h>

#define PHILOX_M0 UINT32_C(0xD2511F53)
#define PHILOX_M1 UINT32_C(0xCD9E8D57)
#define PHILOX_W0 UINT32_C(0x9E3779B9)
#define PHILOX_W1 UINT32_C(0xBB67AE85)

static inline void philox_round(uint32_t c[4], const uint32_t k[2]) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * c[0];
    uint64_t p1 = (uint64_t)PHILOX_M1 * c[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t n0 = hi1 ^ c[1] ^ k[0];
    uint32_t n2 = hi0 ^ c[3] ^ k[1];
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
}

void pe_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    uint32_t k[2] = {key[0], key[1]};
    for (int r = 0; r < 10; r++) {
        if (r) {
            k[0] += PHILOX_W0;
            k[1] += PHILOX_W1;
        }
        philox_round(c, k);
    }
    out[0] = c[0];
    out[1] = c[1];
    out[2] = c[2];
    out[3] = c[3];
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

void pe_rng_block(uint64_t key, uint64_t index, uint32_t out[4]) {
    const uint32_t k[2] = {(uint32_t)key, (uint32_t)(key >> 32)};
    const uint32_t c[4] = {(uint32_t)index, (uint32_t)(index >> 32), 0, 0};
    pe_philox4x32_10(c, k, out);
}

#define TWO_POW_M53 (1.0 / 9007199254740992.0) /* 2^-53 */

static inline uint64_t bits53(uint32_t lo, uint32_t hi) {
    return (((uint64_t)hi << 32) | lo) >> 11;
}

double pe_rng_uniform(uint64_t key, uint64_t index) {
    uint32_t w[4];
    pe_rng_block(key, index, w);
    return (double)bits53(w[0], w[1]) * TWO_POW_M53;
}

double pe_rng_normal(uint64_t key, uint64_t index) {
    uint32_t w[4];
    pe_rng_block(key, index, w);
    double u1 = (double)(bits53(w[0], w[1]) + 1) * TWO_POW_M53; /* (0, 1]: log finite */
    double u2 = (double)bits53(w[2], w[3]) * TWO_POW_M53;       /* [0, 1) */
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

double pe_rng_truncated_normal(uint64_t key, uint64_t index) {
    static const double lo = 0x1.74bcf82c9d85dp-6; /* Phi(-2) = 0.022750131948179198 */
    static const double hi = 0x1.f45a183e9b13dp-1; /* Phi(2)  = 0.9772498680518208 */
    double z = pe_normal_inv_cdf(lo + (hi - lo) * pe_rng_uniform(key, index));
    return z < -2.0 ? -2.0 : z > 2.0 ? 2.0 : z;
}

/* Wichura, M.J. (1988), "Algorithm AS241: The Percentage Points of the Normal
 * Distribution", Applied Statistics 37(3): 477-484. Relative accuracy ~1e-16.
 * Evaluation order as in Python's statistics module, so results match it. */
double pe_normal_inv_cdf(double p) {
    double q = p - 0.5, r, num, den, x;
    if (fabs(q) <= 0.425) {
        r = 0.180625 - q * q;
        num = (((((((2.5090809287301226727e+3 * r + 3.3430575583588128105e+4) * r +
                    6.7265770927008700853e+4) * r + 4.5921953931549871457e+4) * r +
                  1.3731693765509461125e+4) * r + 1.9715909503065514427e+3) * r +
                1.3314166789178437745e+2) * r + 3.3871328727963666080e+0) * q;
        den = (((((((5.2264952788528545610e+3 * r + 2.8729085735721942674e+4) * r +
                    3.9307895800092710610e+4) * r + 2.1213794301586595867e+4) * r +
                  5.3941960214247511077e+3) * r + 6.8718700749205790830e+2) * r +
                4.2313330701600911252e+1) * r + 1.0);
        return num / den;
    }
    r = q <= 0.0 ? p : 1.0 - p;
    r = sqrt(-log(r));
    if (r <= 5.0) {
        r = r - 1.6;
        num = (((((((7.74545014278341407640e-4 * r + 2.27238449892691845833e-2) * r +
                    2.41780725177450611770e-1) * r + 1.27045825245236838258e+0) * r +
                  3.64784832476320460504e+0) * r + 5.76949722146069140550e+0) * r +
                4.63033784615654529590e+0) * r + 1.42343711074968357734e+0);
        den = (((((((1.05075007164441684324e-9 * r + 5.47593808499534494600e-4) * r +
                    1.51986665636164571966e-2) * r + 1.48103976427480074590e-1) * r +
                  6.89767334985100004550e-1) * r + 1.67638483018380384940e+0) * r +
                2.05319162663775882187e+0) * r + 1.0);
    } else {
        r = r - 5.0;
        num = (((((((2.01033439929228813265e-7 * r + 2.71155556874348757815e-5) * r +
                    1.24266094738807843860e-3) * r + 2.65321895265761230930e-2) * r +
                  2.96560571828504891230e-1) * r + 1.78482653991729133580e+0) * r +
                5.46378491116411436990e+0) * r + 6.65790464350110377720e+0);
        den = (((((((2.04426310338993978564e-15 * r + 1.42151175831644588870e-7) * r +
                    1.84631831751005468180e-5) * r + 7.86869131145613259100e-4) * r +
                  1.48753612908506148525e-2) * r + 1.36929880922735805310e-1) * r +
                5.99832206555887937690e-1) * r + 1.0);
    }
    x = num / den;
    return q < 0.0 ? -x : x;
}
