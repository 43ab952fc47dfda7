/* ops/cpu/gemm.c — pe_cpu_gemm: every GEMM of the CPU kernels (mul, matmul,
 * fc and their grads) goes through here, to oneDNN's matmul primitive or
 * OpenBLAS.
 *
 * oneDNN for the large float32 products (alpha 1, beta 0, at least
 * GEMM_DNNL_MIN multiply-adds): its matmul primitive (brgemm / gemm:jit
 * kernels; the scratchpad from the place's workspace pool,
 * ops/cpu/dnnl_util.h, so a run allocates nothing) takes 10-20% less time
 * than OpenBLAS on the MLP's products: the benchmark MLP's training step
 * 11-13% less on one thread, 3-10% less on 2 places of one thread, and
 * with the forward products also cut along K (mm_ksplit) 8-10% less on one
 * place of two threads (docs/benchmarks.md, "Small per-place batches").
 * Its bits depend on the block it computes (a column
 * half of [128, 784] x [784, 512] differs from the same columns of the whole
 * product) and on its own thread count, so C is cut into blocks by the
 * *shape* alone — a power of two, each of at least GEMM_DNNL_MIN
 * multiply-adds — each block one single-threaded primitive run, the blocks
 * shared out over the threads: the same bits for every thread count. The
 * price is parallelism: a product has at most product / GEMM_DNNL_MIN
 * blocks (4 for the MLP's first layer at 128 rows), so more threads than
 * that wait. A block oneDNN cannot run (or that fails to build) runs on
 * OpenBLAS, single-threaded: that block's bits then are OpenBLAS's; a
 * forward product whose K-split scratch cannot be allocated runs in column
 * blocks only (other bits, at memory exhaustion only). That scratch is the
 * caller's (pe_cpu_gemm_ws: fc's and mul's planned workspace, which the
 * memory plan puts over dead activations) or else the place's pool.
 *
 * Bits for any thread count. OpenBLAS's own threads (its OpenMP build uses
 * the calling thread's omp_get_max_threads()) split M and N, never K, but
 * its threaded driver blocks K differently from the single-threaded one,
 * so a product whose K spans more than one of its K blocks changes with
 * the thread count: [64, 784] x [784, 512], the MLP's first layer on one
 * place's 64 rows, differs between 1 and 2 threads (OpenBLAS 0.3.21,
 * SkylakeX kernels; tests/unit/test_ops_math.c). So OpenBLAS always runs
 * single-threaded here, and with several threads PE splits C itself: the
 * larger of M and N into at most nt blocks (multiples of 16 rows or
 * columns), one single-threaded call per block inside an OpenMP region.
 * The single-threaded driver blocks K by K alone, so each element of a
 * block is summed exactly as in the whole product — as long as OpenBLAS
 * runs its regular kernels: for products of at most ~10^6 multiply-adds it
 * switches to small-matrix kernels that sum differently. Hence every block
 * (and the whole) must exceed GEMM_BLOCK_MIN multiply-adds, else fewer
 * blocks, down to one call on one thread. (Measured: single-threaded
 * blocks equal the whole product bitwise in all 1,408 cases of two sweeps
 * of random float32 shapes, 1-1,500 rows and columns, 1-4,500 K, both
 * transposes, 2-4 blocks, where every block had more than 10^6
 * multiply-adds; with smaller blocks 191 of 1,103 cases differed.)
 *
 * Float64 is not split: dgemm's single-threaded blocks differed from the
 * whole product in 5 of 514 cases of the same sweep, so float64 products
 * keep OpenBLAS's own threads, whose bits may depend on the thread count
 * as described above.
 */
#include "ops/cpu/gemm.h"

#include "ops/cpu/dnnl_util.h"
#include "pe/status.h"

#include <cblas.h>
#include <cpuid.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Multiply-adds above which OpenBLAS runs its regular kernels (its
 * small-matrix kernels stop at 100^3). */
#define GEMM_BLOCK_MIN (INT64_C(1) << 20)
#define GEMM_BLOCK_ALIGN 16
/* Multiply-adds per oneDNN block, at least (see the top). */
#define GEMM_DNNL_MIN (INT64_C(1) << 23)
#define GEMM_DNNL_MAX_BLOCKS 64
/* Inner size from which a forward product is also cut along K (mm_ksplit):
 * the scratch's add then costs at most 1/128 of the multiply-adds. */
#define GEMM_KSPLIT_MIN_K 256

/* C[mb, nb] (row stride ldc) = alpha * op(A) op(B) + beta * C with inner
 * size kb, a / b / c at the block's first elements, lda / ldb the operands'
 * row strides as stored: one OpenBLAS call (single-threaded inside a
 * parallel region or with the setting at 1). */
static void blas_call(pe_dtype dt, bool ta, bool tb, int64_t mb, int64_t nb, int64_t kb, double alpha, const void *a,
                      int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
    enum CBLAS_TRANSPOSE opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
    if (dt == PE_DTYPE_FP32)
        cblas_sgemm(CblasRowMajor, opa, opb, (blasint)mb, (blasint)nb, (blasint)kb, (float)alpha, (const float *)a,
                    (blasint)lda, (const float *)b, (blasint)ldb, (float)beta, (float *)c, (blasint)ldc);
    else
        cblas_dgemm(CblasRowMajor, opa, opb, (blasint)mb, (blasint)nb, (blasint)kb, alpha, (const double *)a,
                    (blasint)lda, (const double *)b, (blasint)ldb, beta, (double *)c, (blasint)ldc);
}

/* blas_call with OpenBLAS on one thread (its OpenMP build follows the
 * calling thread's setting). */
static void blas_call_1(pe_dtype dt, bool ta, bool tb, int64_t mb, int64_t nb, int64_t kb, double alpha,
                        const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
    const int prev = omp_get_max_threads();
    if (prev != 1) omp_set_num_threads(1);
    blas_call(dt, ta, tb, mb, nb, kb, alpha, a, lda, b, ldb, beta, c, ldc);
    if (prev != 1) omp_set_num_threads(prev);
}

/* Rows [r0, r1) (by_rows) or columns [r0, r1) of C[m, n] = op(A) op(B),
 * stored without padding: where the block's operands start, and its size. */
typedef struct {
    const char *a, *b;
    char *c;
    int64_t m, n;
} gemm_block;

static gemm_block block_at(size_t es, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a, const void *b,
                           void *c, bool by_rows, int64_t r0, int64_t r1) {
    const int64_t lda = ta ? m : k, ldb = tb ? k : n;
    if (by_rows)
        return (gemm_block){(const char *)a + (size_t)(ta ? r0 : r0 * lda) * es, b, (char *)c + (size_t)(r0 * n) * es,
                            r1 - r0, n};
    return (gemm_block){a, (const char *)b + (size_t)(tb ? r0 * ldb : r0) * es, (char *)c + (size_t)r0 * es, m, r1 - r0};
}

/* [0, dim) in at most `blocks` parts of GEMM_BLOCK_ALIGN multiples: the part
 * size; *used the parts. */
static int64_t block_size(int64_t dim, int64_t blocks, int *used) {
    const int64_t per = ((dim + blocks - 1) / blocks + GEMM_BLOCK_ALIGN - 1) / GEMM_BLOCK_ALIGN * GEMM_BLOCK_ALIGN;
    *used = (int)((dim + per - 1) / per);
    return per;
}

/* Rows or columns [r0, r1) of C on OpenBLAS (see blas_call). */
static void blas_block(pe_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
                       const void *b, double beta, void *c, bool by_rows, int64_t r0, int64_t r1) {
    const gemm_block q = block_at(pe_dtype_size(dt), ta, tb, m, n, k, a, b, c, by_rows, r0, r1);
    blas_call(dt, ta, tb, q.m, q.n, k, alpha, q.a, ta ? m : k, q.b, tb ? k : n, beta, q.c, n);
}

/* One oneDNN block: C[m, n] (row stride ldc) = op(A) op(B), A stored with
 * row stride lda ([m, k], or [k, m] when ta), B with ldb. */
typedef struct {
    bool ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
} mm_geom;

static pe_status mm_build(pe_dnnl_entry *e, const void *geom, int nt) {
    const mm_geom *g = geom;
    dnnl_memory_desc_t amd, bmd, cmd;
    dnnl_dims_t ad = {g->m, g->k}, bd = {g->k, g->n}, cd = {g->m, g->n};
    dnnl_dims_t as = {g->ta ? 1 : g->lda, g->ta ? g->lda : 1}, bs = {g->tb ? 1 : g->ldb, g->tb ? g->ldb : 1},
                cs = {g->ldc, 1};
    dnnl_matmul_desc_t md;
    dnnl_status_t s;
    if ((s = dnnl_memory_desc_init_by_strides(&amd, 2, ad, dnnl_f32, as)) != dnnl_success ||
        (s = dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dnnl_f32, bs)) != dnnl_success ||
        (s = dnnl_memory_desc_init_by_strides(&cmd, 2, cd, dnnl_f32, cs)) != dnnl_success ||
        (s = dnnl_matmul_desc_init(&md, &amd, &bmd, NULL, &cmd)) != dnnl_success)
        return pe_error(PE_ERR_DEVICE, "oneDNN matmul [%lld x %lld] x [%lld x %lld]: %s", (long long)g->m,
                        (long long)g->k, (long long)g->k, (long long)g->n, pe_dnnl_status_str(s));
    PE_CHECK(pe_dnnl_entry_init(e, &md, nt));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_SRC, &amd, PE_DNNL_IN));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_WEIGHTS, &bmd, PE_DNNL_IN));
    return pe_dnnl_entry_bind(e, DNNL_ARG_DST, &cmd, PE_DNNL_OUT);
}

/* One block on oneDNN, one thread: C[mb, nb] (row stride ldc) = op(A) op(B)
 * with inner size kb, a, b, c at the block's first elements, lda / ldb the
 * operands' row strides as stored; OpenBLAS when oneDNN cannot. */
static void mm_run(pe_place place, bool ta, bool tb, int64_t mb, int64_t nb, int64_t kb, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc) {
    const mm_geom g = {ta, tb, mb, nb, kb, lda, ldb, ldc};
    pe_dnnl_key key;
    pe_dnnl_key_init(&key, PE_DNNL_MATMUL);
    const int64_t kv[] = {ta, tb, mb, nb, kb, lda, ldb, ldc};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) pe_dnnl_key_add(&key, kv[i]);
    bool fallback = false;
    if (pe_dnnl_run_cached(&key, place, 1, NULL, 0, mm_build, &g, (void *[]){(void *)a, (void *)b, c},
                           &fallback) != PE_OK || fallback)
        blas_call_1(PE_DTYPE_FP32, ta, tb, mb, nb, kb, 1.0, a, lda, b, ldb, 0.0, c, ldc);
}

/* The bytes of mm_ksplit's scratch P: [m, n] float32. */
static size_t ksplit_bytes(int64_t m, int64_t n) { return sizeof(float) * (size_t)(m * n); }

/* A B with neither transposed and C cut by columns (m <= n: the forward
 * product of a layer, B its weight) is cut along K too: the first half of
 * the rows of B into C, the second into a scratch P, then C += P. With two
 * threads each then reads only its half of B's rows — the same rows the
 * element-wise update after the backward pass (momentum, sgd, ...) gives
 * that thread, whose static split of the weight's elements is by rows. Cut
 * by columns, each thread read a column half of every row, and the update
 * later wrote rows whose other half sat in the other core's cache: the
 * MLP's momentum of fc_0's weight took 133-156 us instead of 74-85 on 2
 * threads (docs/benchmarks.md, "Small per-place batches"). C = P0 + P1 in
 * that order on any thread count: the bits stay the shape's. Returns false
 * (nothing written) when the scratch cannot be had. */
static bool mm_ksplit(pe_place place, void *ws, size_t ws_bytes, int64_t m, int64_t n, int64_t k, const float *a,
                      const float *b, float *c, int64_t blocks, int nt) {
    void *scratch = ws, *handle = NULL;
    if ((!ws || ws_bytes < ksplit_bytes(m, n)) && /* no planned scratch: the place's pool */
        pe_dnnl_scratch_acquire(place, ksplit_bytes(m, n), &scratch, &handle) != PE_OK)
        return false;
    float *p = scratch;
    const int64_t k0 = (k + 1) / 2;
    int used;
    const int64_t per = block_size(n, blocks / 2, &used);
    const int items = 2 * used, team = nt < items ? nt : items;
    #pragma omp parallel num_threads(team) if (team > 1)
    {
        #pragma omp for schedule(static)
        for (int i = 0; i < items; i++) {
            const int h = i / used;
            const int64_t c0 = (i % used) * per, c1 = c0 + per < n ? c0 + per : n;
            if (h == 0) mm_run(place, false, false, m, c1 - c0, k0, a, k, b + c0, n, c + c0, n);
            else mm_run(place, false, false, m, c1 - c0, k - k0, a + k0, k, b + k0 * n + c0, n, p + c0, n);
        }
        #pragma omp for schedule(static)
        for (int64_t i = 0; i < m * n; i++) c[i] += p[i];
    }
    pe_dnnl_scratch_release(handle);
    return true;
}

/* The number of oneDNN blocks of a large float32 product: a power of two,
 * set by the shape alone (see the top). */
static int64_t mm_block_count(int64_t m, int64_t n, int64_t k) {
    const int64_t dim = m > n ? m : n;
    int64_t blocks = 1;
    while (blocks * 2 <= GEMM_DNNL_MAX_BLOCKS && m * n * k / (blocks * 2) >= GEMM_DNNL_MIN &&
           dim / (blocks * 2) >= GEMM_BLOCK_ALIGN)
        blocks *= 2;
    return blocks;
}

/* Whether the product goes through mm_ksplit (given its block count). */
static bool mm_ksplits(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t blocks) {
    return !ta && !tb && m <= n && blocks >= 2 && k >= GEMM_KSPLIT_MIN_K;
}

/* The large float32 product on oneDNN in blocks fixed by the shape. */
static void mm_blocks(pe_place place, void *ws, size_t ws_bytes, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      const float *a, const float *b, float *c, int nt) {
    const bool by_rows = m > n;
    const int64_t dim = by_rows ? m : n;
    const int64_t blocks = mm_block_count(m, n, k);
    if (mm_ksplits(ta, tb, m, n, k, blocks) && mm_ksplit(place, ws, ws_bytes, m, n, k, a, b, c, blocks, nt)) return;
    int used;
    const int64_t per = block_size(dim, blocks, &used);
    const int team = nt < used ? nt : used;
    #pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
    for (int p = 0; p < used; p++) {
        const int64_t r0 = p * per, r1 = r0 + per < dim ? r0 + per : dim;
        const gemm_block q = block_at(sizeof(float), ta, tb, m, n, k, a, b, c, by_rows, r0, r1);
        mm_run(place, ta, tb, q.m, q.n, k, (const float *)q.a, ta ? m : k, (const float *)q.b, tb ? k : n,
               (float *)q.c, n);
    }
}

/* OpenBLAS's DYNAMIC_ARCH build picks its kernels by CPU model when it
 * loads. A model newer than the build falls back to generic kernels:
 * Debian bookworm's OpenBLAS 0.3.21 on Intel Emerald Rapids (family 6,
 * model 207) runs "Prescott" SSE3 kernels, 29 GFLOP/s on the MLP's
 * [128, 784] x [784, 512] where its SkylakeX kernels give 130 (one core of
 * the lent GPU machines' host). The choice is made before any PE code runs,
 * so PE can only say so, once, with the fix: OPENBLAS_CORETYPE in the
 * environment of the process (pe's Python package sets it at import for
 * the models it knows, before OpenBLAS loads; docs/guide.md). */
static pthread_once_t g_blas_check = PTHREAD_ONCE_INIT;

/* Intel family 6 models newer than OpenBLAS 0.3.21's table (the list of
 * bindings/python/pe/_cpu.py): Sapphire Rapids, Emerald Rapids, Granite
 * Rapids. */
static const int k_newer_intel[] = {143, 207, 173, 174};

const char *pe_cpu_blas_coretype_for(bool intel, int family, int model, bool avx512, bool avx2) {
    if (!intel || family != 6) return NULL;
    for (size_t i = 0; i < sizeof k_newer_intel / sizeof k_newer_intel[0]; i++)
        if (model == k_newer_intel[i]) return avx512 ? "SkylakeX" : avx2 ? "Haswell" : NULL;
    return NULL;
}

const char *pe_blas_coretype_hint(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return NULL;
    const bool intel = b == 0x756e6547 && d == 0x49656e69 && c == 0x6c65746e; /* "GenuineIntel" */
    if (!__get_cpuid(1, &a, &b, &c, &d)) return NULL;
    const int family = (int)((a >> 8) & 0xf), model = (int)(((a >> 4) & 0xf) | ((a >> 12) & 0xf0));
    __builtin_cpu_init();
    return pe_cpu_blas_coretype_for(intel, family, model, __builtin_cpu_supports("avx512f"),
                                    __builtin_cpu_supports("avx2"));
}

const char *pe_blas_core(void) {
    const char *core = openblas_get_corename();
    return core ? core : "";
}

static void check_blas_core(void) {
    static const char *const generic[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom",
                                          "Katmai", "Coppermine", "Northwood", "Banias"};
    const char *core = openblas_get_corename();
    if (!core) return;
    bool fallback = false;
    for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++) fallback |= !strcmp(core, generic[i]);
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f"), avx2 = __builtin_cpu_supports("avx2");
    const char *forced = getenv("OPENBLAS_CORETYPE");
    if (fallback && (avx512 || avx2))
        pe_log(PE_LOG_WARN,
               "OpenBLAS runs its generic '%s' kernels on this CPU, which has %s (%s): GEMMs run several times "
               "slower than they can; start the process with OPENBLAS_CORETYPE=%s in the environment",
               core, avx512 ? "AVX-512" : "AVX2",
               forced && *forced ? "OPENBLAS_CORETYPE asks for them" : "this OpenBLAS does not know the CPU's model",
               avx512 ? "SkylakeX" : "Haswell");
}

/* The product takes the oneDNN path (mm_blocks). */
static bool on_dnnl(pe_dtype dt, int64_t m, int64_t n, int64_t k, double alpha, double beta) {
    return dt == PE_DTYPE_FP32 && alpha == 1.0 && beta == 0.0 && m * n * k >= GEMM_DNNL_MIN;
}

size_t pe_cpu_gemm_scratch_bytes(pe_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                                 double beta) {
    if (m <= 0 || n <= 0 || k <= 0 || !on_dnnl(dt, m, n, k, alpha, beta)) return 0;
    return mm_ksplits(ta, tb, m, n, k, mm_block_count(m, n, k)) ? ksplit_bytes(m, n) : 0;
}

void pe_cpu_gemm(pe_place place, pe_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                 const void *a, const void *b, double beta, void *c) {
    pe_cpu_gemm_ws(place, NULL, 0, dt, ta, tb, m, n, k, alpha, a, b, beta, c);
}

void pe_cpu_gemm_ws(pe_place place, void *ws, size_t ws_bytes, pe_dtype dt, bool ta, bool tb, int64_t m, int64_t n,
                    int64_t k, double alpha, const void *a, const void *b, double beta, void *c) {
    pthread_once(&g_blas_check, check_blas_core);
    if (m == 0 || n == 0) return;
    if (k == 0) { /* empty sum */
        if (beta == 0.0) memset(c, 0, (size_t)(m * n) * pe_dtype_size(dt));
        return;
    }
    if (dt != PE_DTYPE_FP32) { /* float64: OpenBLAS's own threads, as before (see above) */
        blas_call(dt, ta, tb, m, n, k, alpha, a, ta ? m : k, b, tb ? k : n, beta, c, n);
        return;
    }
    const int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (on_dnnl(dt, m, n, k, alpha, beta)) {
        mm_blocks(place, ws, ws_bytes, ta, tb, m, n, k, a, b, c, nt);
        return;
    }
    const bool by_rows = m > n;
    const int64_t dim = by_rows ? m : n, other = by_rows ? n : m;
    /* the most blocks (at most nt) whose every block, the last included,
     * has more than GEMM_BLOCK_MIN multiply-adds */
    int parts = nt, used;
    int64_t per = dim;
    for (; parts > 1; parts--) {
        per = block_size(dim, parts, &used);
        if (used == parts && (dim - (used - 1) * per) * other * k > GEMM_BLOCK_MIN) break;
    }
    if (parts <= 1) {
        blas_call_1(dt, ta, tb, m, n, k, alpha, a, ta ? m : k, b, tb ? k : n, beta, c, n);
        return;
    }
    #pragma omp parallel for num_threads(parts) schedule(static)
    for (int p = 0; p < parts; p++) {
        const int64_t r0 = p * per, r1 = r0 + per < dim ? r0 + per : dim;
        blas_block(dt, ta, tb, m, n, k, alpha, a, b, beta, c, by_rows, r0, r1);
    }
}
