/* runtime/rng_core.h — the pure core of PE's counter-based generator
 * (Philox4x32-10 and the maps to uniform, normal and truncated normal),
 * inline and usable from host C and from CUDA device code alike.
 *
 *     uint32_t w[4];
 *     pe_rng_core_block(key, (uint64_t)i, w);          // element i of stream key
 *     double u = pe_rng_core_uniform(w), z = pe_rng_core_normal(w);
 *
 * What: the functions runtime/rng.c exports (pe_philox4x32_10, pe_rng_block,
 * pe_rng_uniform, pe_rng_normal, pe_rng_truncated_normal, pe_normal_inv_cdf)
 * are thin wrappers of these; the CUDA kernels (ops/cuda/random.cu, the
 * dropout mask in ops/cuda/activation.cu) call them directly, so a seed draws
 * the same integers on either place. The exact derivation is written at the
 * top of runtime/rng.c; the stream key (pe_rng_key, a string hash) stays
 * host-only there.
 *
 * How: PE_HD marks each function __host__ __device__ under nvcc. Every
 * product that feeds a sum goes through PE_RNG_DMUL/PE_RNG_DADD, which are
 * __dmul_rn/__dadd_rn in device code: nvcc would otherwise contract them into
 * FMAs and round differently from the host (GCC on x86-64 has no FMA in the
 * baseline ISA). Integer words and uniforms are then bit-identical on host
 * and device; normals also go through log/cos/sqrt, whose device versions
 * (within 1-2 double ulp) may differ from glibc's in the last double bit.
 */
#ifndef PE_RUNTIME_RNG_CORE_H
#define PE_RUNTIME_RNG_CORE_H

#include <math.h>
#include <stdint.h>

#ifndef PE_HD
#ifdef __CUDACC__
#define PE_HD __host__ __device__
#else
#define PE_HD
#endif
#endif

#ifdef __CUDA_ARCH__
#define PE_RNG_DMUL(a, b) __dmul_rn((a), (b))
#define PE_RNG_DADD(a, b) __dadd_rn((a), (b))
#else
#define PE_RNG_DMUL(a, b) ((a) * (b))
#define PE_RNG_DADD(a, b) ((a) + (b))
#endif

/* out = Philox4x32-10(ctr, key) (Random123's philox4x32_10). */
static inline PE_HD void pe_rng_core_philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        if (r) {
            k0 += UINT32_C(0x9E3779B9);
            k1 += UINT32_C(0xBB67AE85);
        }
        const uint64_t p0 = (uint64_t)UINT32_C(0xD2511F53) * c0;
        const uint64_t p1 = (uint64_t)UINT32_C(0xCD9E8D57) * c2;
        const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* The four words of element `index` of stream `key`: counter (index, 0). */
static inline PE_HD void pe_rng_core_block(uint64_t key, uint64_t index, uint32_t out[4]) {
    const uint32_t k[2] = {(uint32_t)key, (uint32_t)(key >> 32)};
    const uint32_t c[4] = {(uint32_t)index, (uint32_t)(index >> 32), 0, 0};
    pe_rng_core_philox(c, k, out);
}

#define PE_RNG_TWO_POW_M53 (1.0 / 9007199254740992.0) /* 2^-53 */

/* The top 53 bits of the 64-bit word (hi << 32) | lo. */
static inline PE_HD uint64_t pe_rng_core_bits53(uint32_t lo, uint32_t hi) {
    return (((uint64_t)hi << 32) | lo) >> 11;
}

/* A block's uniform in [0, 1) (words 0, 1). */
static inline PE_HD double pe_rng_core_uniform(const uint32_t w[4]) {
    return (double)pe_rng_core_bits53(w[0], w[1]) * PE_RNG_TWO_POW_M53;
}

/* A block's standard normal (Box-Muller, cosine branch). */
static inline PE_HD double pe_rng_core_normal(const uint32_t w[4]) {
    const double u1 = (double)(pe_rng_core_bits53(w[0], w[1]) + 1) * PE_RNG_TWO_POW_M53; /* (0, 1]: log finite */
    const double u2 = (double)pe_rng_core_bits53(w[2], w[3]) * PE_RNG_TWO_POW_M53;       /* [0, 1) */
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Inverse of the standard normal CDF: Wichura's AS241 in the evaluation order
 * of Python's statistics module (see pe_normal_inv_cdf). p in (0, 1). */
static inline PE_HD double pe_rng_core_inv_cdf(double p) {
#define PE_RNG_HORNER(acc, c) acc = PE_RNG_DADD(PE_RNG_DMUL(acc, r), c)
    const double q = p - 0.5;
    double r, num, den;
    if (fabs(q) <= 0.425) {
        r = 0.180625 - PE_RNG_DMUL(q, q);
        num = 2.5090809287301226727e+3;
        PE_RNG_HORNER(num, 3.3430575583588128105e+4);
        PE_RNG_HORNER(num, 6.7265770927008700853e+4);
        PE_RNG_HORNER(num, 4.5921953931549871457e+4);
        PE_RNG_HORNER(num, 1.3731693765509461125e+4);
        PE_RNG_HORNER(num, 1.9715909503065514427e+3);
        PE_RNG_HORNER(num, 1.3314166789178437745e+2);
        PE_RNG_HORNER(num, 3.3871328727963666080e+0);
        num = num * q;
        den = 5.2264952788528545610e+3;
        PE_RNG_HORNER(den, 2.8729085735721942674e+4);
        PE_RNG_HORNER(den, 3.9307895800092710610e+4);
        PE_RNG_HORNER(den, 2.1213794301586595867e+4);
        PE_RNG_HORNER(den, 5.3941960214247511077e+3);
        PE_RNG_HORNER(den, 6.8718700749205790830e+2);
        PE_RNG_HORNER(den, 4.2313330701600911252e+1);
        PE_RNG_HORNER(den, 1.0);
        return num / den;
    }
    r = q <= 0.0 ? p : 1.0 - p;
    r = sqrt(-log(r));
    if (r <= 5.0) {
        r = r - 1.6;
        num = 7.74545014278341407640e-4;
        PE_RNG_HORNER(num, 2.27238449892691845833e-2);
        PE_RNG_HORNER(num, 2.41780725177450611770e-1);
        PE_RNG_HORNER(num, 1.27045825245236838258e+0);
        PE_RNG_HORNER(num, 3.64784832476320460504e+0);
        PE_RNG_HORNER(num, 5.76949722146069140550e+0);
        PE_RNG_HORNER(num, 4.63033784615654529590e+0);
        PE_RNG_HORNER(num, 1.42343711074968357734e+0);
        den = 1.05075007164441684324e-9;
        PE_RNG_HORNER(den, 5.47593808499534494600e-4);
        PE_RNG_HORNER(den, 1.51986665636164571966e-2);
        PE_RNG_HORNER(den, 1.48103976427480074590e-1);
        PE_RNG_HORNER(den, 6.89767334985100004550e-1);
        PE_RNG_HORNER(den, 1.67638483018380384940e+0);
        PE_RNG_HORNER(den, 2.05319162663775882187e+0);
        PE_RNG_HORNER(den, 1.0);
    } else {
        r = r - 5.0;
        num = 2.01033439929228813265e-7;
        PE_RNG_HORNER(num, 2.71155556874348757815e-5);
        PE_RNG_HORNER(num, 1.24266094738807843860e-3);
        PE_RNG_HORNER(num, 2.65321895265761230930e-2);
        PE_RNG_HORNER(num, 2.96560571828504891230e-1);
        PE_RNG_HORNER(num, 1.78482653991729133580e+0);
        PE_RNG_HORNER(num, 5.46378491116411436990e+0);
        PE_RNG_HORNER(num, 6.65790464350110377720e+0);
        den = 2.04426310338993978564e-15;
        PE_RNG_HORNER(den, 1.42151175831644588870e-7);
        PE_RNG_HORNER(den, 1.84631831751005468180e-5);
        PE_RNG_HORNER(den, 7.86869131145613259100e-4);
        PE_RNG_HORNER(den, 1.48753612908506148525e-2);
        PE_RNG_HORNER(den, 1.36929880922735805310e-1);
        PE_RNG_HORNER(den, 5.99832206555887937690e-1);
        PE_RNG_HORNER(den, 1.0);
    }
#undef PE_RNG_HORNER
    const double x = num / den;
    return q < 0.0 ? -x : x;
}

/* A block's standard normal truncated to [-2, 2]: the inverse CDF of a
 * uniform in [Phi(-2), Phi(2)) (Paddle's truncated_gaussian_random). */
static inline PE_HD double pe_rng_core_truncated_normal(const uint32_t w[4]) {
    const double lo = 0x1.74bcf82c9d85dp-6; /* Phi(-2) = 0.022750131948179198 */
    const double hi = 0x1.f45a183e9b13dp-1; /* Phi(2)  = 0.9772498680518208 */
    const double z = pe_rng_core_inv_cdf(PE_RNG_DADD(lo, PE_RNG_DMUL(hi - lo, pe_rng_core_uniform(w))));
    return z < -2.0 ? -2.0 : z > 2.0 ? 2.0 : z;
}

#endif
